package sql

// ProjectLogsStatement exposes ProjectLogs's query, for EXPLAIN.
var ProjectLogsStatement = projectLogsStatement
