"""Fixtures the training tests share."""

import pytest

from tests.helpers import make_records


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """make_records' tiny pretraining data (64 instances, with metadata), one per test module."""
  return make_records(str(tmp_path_factory.mktemp("data") / "train.tfrecord"))
