"""The version of deepnlme (what `deepnlme.__version__` and saved fits report)."""

__version__ = "0.1.0"
