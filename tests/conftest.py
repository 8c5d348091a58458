import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# Four CPU devices for the whole session (pmap, collectives); single-device programs run on the
# first and cost the same. Set before the CPU client starts; a run may choose another count.
os.environ.setdefault("AUTOGRAD_XLA_CPU_DEVICES", "4")
