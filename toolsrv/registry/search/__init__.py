# toolsrv/registry/search/ — discovery: the registry's tools ranked against a need in words.
#
# index.py is the index that follows one Registry (re-indexing only the tools that moved)
# and ranks its visible tools, BM25 fused with the semantic ranker; semantic.py the
# semantic ranker's model (static embeddings from the `search` extra, loaded on the first
# search); fusion.py how the two rankers' scores become one.  tree/searchfile.py runs
# them in one worker thread, never on the event loop (doc/search.md).
#
# May import: each other, registry/ (resolve.py), errors, dirs/.  Never tree/, serve/,
# app or cli/, nor run/.
# Imports nothing here, so that importing one module costs that module alone.
