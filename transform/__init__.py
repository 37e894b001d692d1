"""The Drainer's stages, run on Spark, and the TiDB codec they decode with (``transform.codec``).

Modules, one job each:

- ``plan``        the run's range and the pumps it reads
- ``pull``        Spark tasks streaming a pump's records of a ts sub-range
- ``drain``       the Spark stages of one run: pull, pair, sort, decode
- ``rowchanges``  executor-side decode of ordered transactions into row changes
- ``history``     DDL-versioned table schemas from the upstream's DDL history
- ``filters``     TiDB Binlog's table filters
- ``reduce``      the net change per key (what the mirror merge applies)
- ``changes``     what one run hands to the sinks
- ``spark``       the Spark session
"""
