# toolsrv/registry/ — the tools on disk.
#
# registry.py scans the tool search path, keeps one Tool per name (the first directory
# wins) with a revision that moves on every change, and answers the tree's questions
# (index, a tool's files, why one is missing); metafile.py parses and checks one .meta
# (residentmeta.py its `resident` field, metaerror.py the error they raise),
# variants.py picks its variant for this host, resolve.py resolves the command; watch.py
# sees changes (inotify, else polling); names.py holds the name rule that tools,
# sessions and agents share; schemaref.py a schema's refs (nothing fetched) and the
# budgets of a validation, schemacost.py what a schema costs (bounded at load);
# warmstart.py which calls start warm.  search/ is discovery (BM25, the semantic ranker's
# model, their fusion): its __init__ names its modules.
#
# May import: dirs/, errors, record.  Never tree/, serve/, app or cli/, nor run/ (run/
# and registry/ stand side by side).
# Imports nothing here, so that importing one module costs that module alone.
