"""The tool's version, written into every record so results can be traced to the code that made them."""

__version__ = "0.1.0"
TOOL_VERSION = __version__
