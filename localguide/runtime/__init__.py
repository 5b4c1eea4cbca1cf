"""Runtime services every layer uses: the disk cache and bounded memory caches, numba's kernel cache and
the kernel warm-up, progress on the ``localguide`` logger, thread choices, and helpers for pauses
and memory (``held``, ``gcpause``, ``slabs``, ``packing``). Nothing here imports a layer above it."""
