"""``python -m agentkit``: see :mod:`agentkit.cli`."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
