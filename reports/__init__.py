"""Aggregation of shadowcheck JUnit results on Apache Spark."""
