# a machine of the cores this process may run on: os.cpu_count() as the pinned cores (a 2-core box)
import os
os.cpu_count = lambda: len(os.sched_getaffinity(0))
