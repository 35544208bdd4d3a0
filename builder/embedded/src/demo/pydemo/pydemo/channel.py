import ctypes
import os


def library():
    """Load libdemo from LD_LIBRARY_PATH, where env.sh puts the install."""
    return ctypes.CDLL(os.environ.get("DEMO_LIB", "libdemo.so.1"))


class Channel:
    """One channel of libdemo."""

    def __init__(self, index=0):
        self.index = index
        self.lib = library()
        self.channels = self.lib.demo_channels()

    def describe(self):
        return "channel %d of %d" % (self.index, self.channels)
