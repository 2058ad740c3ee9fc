"""The test suite, a package: helpers import by their place in it (`from tests.index.index_oracle import N`)."""
