"""The serving tests' shared export, written once per test run (see shared.py).

test_serving.py and test_tf_hub.py both read it, and pytest-xdist's `--dist loadfile` may give
them to different worker processes: the first worker to ask writes it under a lock in the
directory every worker's temporary folder sits in; the other waits for that lock and reads what
was written (the export, and the model loaded back from the checkpoint the export was made from).
"""

import fcntl
import shutil

import pytest

from tests.serving import shared


@pytest.fixture(scope="session")
def exported(tmp_path_factory, worker_id):
  """(paths, keras pretraining model, python tokenizer, root) of the command line's export."""
  if worker_id == "master":  # not under xdist
    return shared.export_with_the_command_line(tmp_path_factory.mktemp("serving"))
  common = tmp_path_factory.getbasetemp().parent  # the same for every xdist worker of a run
  root = common / "serving_export"
  with open(common / "serving_export.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
    if (root / "done").exists():
      return shared.read_export(root)
    if root.exists():  # a worker that failed while writing it: this one tries again
      shutil.rmtree(root)
    root.mkdir()
    result = shared.export_with_the_command_line(root)
    (root / "done").write_text("")
    return result
