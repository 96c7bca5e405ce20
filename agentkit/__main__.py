"""``python -m agentkit``: see :mod:`agentkit.faces.cli`."""

from agentkit.faces.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
