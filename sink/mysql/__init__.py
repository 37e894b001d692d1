"""The MySQL sink: a run's transactions applied to MySQL, MariaDB or TiDB in commit order."""
