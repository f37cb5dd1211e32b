import sys

from gert.cli import main

sys.exit(main())
