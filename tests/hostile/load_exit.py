# The notebook ends its own process while its cells run.
import os

os._exit(9)
