"""gert's tools, apart from the runtime's import path: the ``gert`` command (cli), ``gert bench`` (bench), how a
Model and its stats show (display, stats) and progress bars (progress). The runtime imports them only when asked
(``Model.stats()``, ``warmup(progress=True)``, a Model's repr)."""
