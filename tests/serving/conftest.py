"""The serving tests' shared export, written once per session (see shared.py)."""

import pytest

from tests.serving import shared


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
  """(paths, keras pretraining model, python tokenizer, root) of the command line's export."""
  return shared.export_with_the_command_line(tmp_path_factory.mktemp("serving"))
