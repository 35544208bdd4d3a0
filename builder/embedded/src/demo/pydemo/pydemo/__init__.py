"""pydemo: a tiny package that loads libdemo, for epbuild's offline demo recipe."""
from .channel import Channel, library

__all__ = ["Channel", "library"]
