"""Test configuration: real services are started by the fixture modules below, once per session."""

pytest_plugins = [
    "tests.fixtures.kafka",
    "tests.fixtures.s3",
    "tests.fixtures.hdfs",
    "tests.fixtures.spark",
]
