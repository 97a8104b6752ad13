"""The embedded backend: one SQLite file per store (turns, items with their vectors, history, the
LTM graph), with the per-user in-process views of ``lightmem.stores.views`` for search.

``store`` is the backend (``SQLiteStore``, config ``store=sqlite``); ``tables`` its SQL layer;
``graph`` the LTM graph tables; ``offline`` the consolidation cycle's reads and writes; ``eviction``
the capacity rule; ``snapshot`` the views kept whole in the database; ``backup`` online copies;
``faults`` maps SQLite errors to named ``StoreError`` subclasses.
"""
