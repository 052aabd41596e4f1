"""The suite's CPU-only parts, which the noxfile, the report and every GPU script share (stdlib only:
nothing here imports torch, cupy or freetoken, so nox's own Python and the CPU tests use them anywhere):

- ``results``: where results go (kinds, ``results/<device>/`` paths, the device slug, provenance,
  the writer and reader, the one-line machine description)
- ``models``: the typed result documents, shared by their writers and the report
- ``geometry``: the shapes everything is measured on (model, NVFP4 banks, rings, edge-case rows, regimes)
- ``stats``: paired-round statistics (speedup, A/A spread, verdict); ``rounds``: the paired-rounds runner
- ``commands``: every command the docs, the report and nox print
"""
