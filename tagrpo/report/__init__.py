"""Report assembly: tables and figures from stage metrics."""
