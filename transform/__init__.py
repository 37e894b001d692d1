"""The Drainer's stages, run on Spark, and the TiDB codec they decode with (``transform.codec``).

Modules, one job each:

- ``plan``          the run's range and the pumps it reads
- ``pull``          Spark tasks streaming a pump's records of a ts sub-range
- ``drain``         the Spark stages of one run: pull, pair, decode
- ``rowchanges``    executor-side decode of ordered transactions into row changes
- ``history``       DDL-versioned table schemas from the upstream's DDL history
- ``ddl``           what a DDL job does to a binlog consumer, by TiDB's job type
- ``filters``       TiDB Binlog's table filters
- ``event_filter``  TiDB Binlog's binlog-filter-rule (row changes and DDL a drain leaves out)
- ``goregex``       Go's regular expressions for the filters binlake shares with TiDB Binlog
- ``loopback``      the transactions a loopback-controlled drainer leaves out
- ``changes``       what one run hands to the sinks
- ``ordered``       a run's transactions in commit order, for the sinks that apply them one by one
- ``reduce``        the net change per key (what the mirror merge applies)
- ``spark``         the Spark session
- ``spark_archive`` the class-data sharing archive of Spark's classes the driver JVM maps
- ``worker``        a Spark Python worker's process settings
- ``failpoints``    named failpoints for crash tests
- ``errors``        the stages' named errors
"""
