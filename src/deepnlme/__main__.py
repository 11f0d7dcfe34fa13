"""``python -m deepnlme``: the ``deepnlme`` command, for environments without its script on
``PATH`` (a virtual environment not activated, a notebook's ``!python -m deepnlme ...``)."""

from __future__ import annotations

import sys

from deepnlme.interfaces.cli import main

if __name__ == "__main__":
    sys.exit(main())
