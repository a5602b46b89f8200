"""The cached compiled grammar, in one package: what a grammar's build leaves for the next start.

- :mod:`.format`: one cache file (the classes, the GNF, the σ_in index's arrays, their metadata);
- :mod:`.directory`: the cache directory, its keys (input, vocabulary, code version) and its size;
- :mod:`.index`: the σ_in index read back from a file, or built when the file has none that fits;
- :mod:`.grammars`: the in-process LRU of ready grammars (:class:`~.grammars.GrammarCache`,
  ``engine_for``, ``matcher_for``), in memory first, then the directory, then a build.

Nothing is imported here: a cache-directory miss imports neither the file reader nor the index
loader (``cache.grammars`` imports them once a file is found).
"""
