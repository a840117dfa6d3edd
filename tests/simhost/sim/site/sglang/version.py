# The source tree's placeholder, for tests that import the simulator in place: install.py replaces this file
# (and adds _version.py from 0.5.7) with the files the installed release really has.
__version__ = "0.5.7"
