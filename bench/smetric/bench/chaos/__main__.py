"""``python -m smetric.bench.chaos``: the same as ``smetric chaos``."""

from smetric.bench.chaos.cli import main

raise SystemExit(main())
