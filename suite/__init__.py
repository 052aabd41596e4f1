"""The suite's CPU-only parts (stdlib only: the noxfile, the report and every GPU script share them): ``commands``
(the one table of measurements and every command printed), ``results`` (where documents go, the one writer),
``models`` (the typed documents), ``geometry`` (the shapes measured on), ``kernels`` (the vocabulary),
``stats`` (the Comparison and its rules), ``rounds`` (the paired-rounds runner), ``migrate``, ``log``.
"""
