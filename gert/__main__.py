import sys

from gert.tools.cli import main

sys.exit(main())
