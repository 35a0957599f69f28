"""Storage faults: a lazy filesystem for a node's queue directory that loses what was not
fsynced at a power cut, and refuses writes on command (disk full, a failing disk).

The filesystem (:mod:`.lazyfs`) runs in a process of its own over FUSE; :mod:`.held` and
:mod:`.names` are what it holds back; :mod:`.mount` is the controller targets use."""
