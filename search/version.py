"""The tool's version, written into every record so results can be traced to the code that made them,
and shown by `autotune --version`."""

__version__ = "0.1.0"
