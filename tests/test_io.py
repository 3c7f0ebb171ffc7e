"""bert_tf.io: the one atomic-write helper and the local/gfile file helpers."""

import os
import subprocess
import sys

import pytest

from bert_tf import io
from tests import helpers


def test_atomic_write_appears_only_when_complete(tmp_path):
  path = str(tmp_path / "out.txt")
  with io.atomic_write(path) as f:
    f.write("half")
    assert not os.path.exists(path)  # still under its temporary name
    assert os.listdir(tmp_path) == [os.path.basename(io.temp_name(path))]
  assert open(path).read() == "half"
  assert os.listdir(tmp_path) == ["out.txt"]


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
  path = str(tmp_path / "out.txt")
  io.write_text(path, "old")
  with pytest.raises(RuntimeError):
    with io.atomic_write(path) as f:
      f.write("new but broken")
      raise RuntimeError("killed half way")
  assert open(path).read() == "old"
  assert os.listdir(tmp_path) == ["out.txt"]


def test_overwrite_false_refuses_before_writing(tmp_path):
  path = str(tmp_path / "out.txt")
  io.write_text(path, "old")
  with pytest.raises(FileExistsError):
    with io.atomic_write(path, overwrite=False) as f:
      f.write("new")
  assert open(path).read() == "old"


def test_atomic_path_for_directories_and_multi_file_writers(tmp_path):
  target = str(tmp_path / "model")
  with io.atomic_path(target) as tmp:
    os.makedirs(os.path.join(tmp, "assets"))
    io.write_text(os.path.join(tmp, "assets", "a.txt"), "a")
  assert open(os.path.join(target, "assets", "a.txt")).read() == "a"
  # A directory is replaced as a whole.
  with io.atomic_path(target) as tmp:
    os.makedirs(tmp)
    io.write_text(os.path.join(tmp, "b.txt"), "b")
  assert os.listdir(target) == ["b.txt"]
  # A writer that adds its own suffixes (a TF checkpoint): every part is renamed, or none.
  prefix = str(tmp_path / "ckpt")
  with pytest.raises(OSError):
    with io.atomic_path(prefix, parts=(".data", ".index")) as tmp:
      io.write_text(tmp + ".data", "d")
      raise OSError("disk full")
  assert sorted(os.listdir(tmp_path)) == ["model"]
  with io.atomic_path(prefix, parts=(".data", ".index")) as tmp:
    io.write_text(tmp + ".data", "d")
    io.write_text(tmp + ".index", "i")
  assert sorted(os.listdir(tmp_path)) == ["ckpt.data", "ckpt.index", "model"]


@pytest.mark.slow
def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
  path = str(tmp_path / "out.tfrecord")
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True).stdout.strip()
  stale = f"{path}.incomplete-{dead}"
  alive = io.temp_name(path)
  for name in (stale, alive):
    io.write_text(name, "x")
  assert io.remove_stale_temp_files(path) == [stale]
  assert os.path.exists(alive) and not os.path.exists(stale)


def test_gfile_paths_use_tensorflow(tmp_path):
  # ram:// is a TensorFlow filesystem: the same helpers work on it.
  path = "ram://bert_tf_test_io/sub/out.txt"
  io.makedirs("ram://bert_tf_test_io/sub")
  io.write_text(path, "remote")
  assert io.read_text(path) == "remote" and io.exists(path) and io.size(path) == 6
  assert io.listdir("ram://bert_tf_test_io/sub") == ["out.txt"]
  io.remove(path)
  assert not io.exists(path)


@pytest.mark.slow
def test_local_helpers_never_import_tensorflow(tmp_path):
  code = ("import sys; from bert_tf import io\n"
          f"p = {str(tmp_path / 'a.txt')!r}\n"
          "io.write_text(p, 'x'); io.copy(p, p + '.b'); assert io.read_text(p + '.b') == 'x'\n"
          "io.listdir(io.glob(p)[0].rsplit('/', 1)[0]); io.remove(p)\n"
          "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n")
  subprocess.run([sys.executable, "-c", code], check=True, env=helpers.subprocess_env())


# === One writer per run directory ===


def _dead_pid():
  process = subprocess.Popen(["true"])
  process.wait()
  return process.pid


def test_a_live_lock_refuses_a_second_writer(tmp_path):
  directory = str(tmp_path / "run")
  helpers.write_lock(directory, 1)  # pid 1 is alive on every Linux host
  with pytest.raises(io.DirectoryInUseError, match=r"run is in use by run_pretraining \(pid 1 "
                                                   r"on .*one run per directory"):
    with io.directory_lock(directory, "run_classifier"):
      pass
  # Another host's lock without a heartbeat (older versions) is never taken over.
  helpers.write_lock(directory, _dead_pid(), host="elsewhere")
  with pytest.raises(io.DirectoryInUseError, match="on elsewhere"):
    with io.directory_lock(directory, "export"):
      pass


def test_another_hosts_lock_is_taken_over_once_its_heartbeat_stops(tmp_path, monkeypatch, caplog):
  """A chief relaunched on a new machine (Kubernetes, managed instance groups) resumes its run:
  the old holder's lock is taken over once unrefreshed for BERT_TF_LOCK_STALE_SECONDS; while
  its holder refreshes it, the newcomer waits that long and is refused."""
  import threading  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  directory = str(tmp_path / "run")
  monkeypatch.setenv("BERT_TF_LOCK_STALE_SECONDS", "1.5")
  helpers.write_lock(directory, 7, host="old-pod", heartbeat=time.time() - 5)
  with io.directory_lock(directory, "run_pretraining"):
    with open(os.path.join(directory, io.LOCK_NAME)) as f:
      assert f'"pid": {os.getpid()}' in f.read()
  assert any("Taking over the lock of" in r.getMessage() and "on old-pod" in r.getMessage()
             for r in caplog.records)
  # Stopped less than 1.5 s ago: the newcomer waits for it to go stale, then takes it over.
  beat = time.time() - 0.5
  helpers.write_lock(directory, 7, host="old-pod", heartbeat=beat)
  with io.directory_lock(directory, "run_pretraining"):
    taken = time.time()
  assert beat + 1.5 < taken < beat + 1.5 + 2.0, taken - beat
  # A holder that keeps refreshing its lock refuses the newcomer after the wait.
  stop = threading.Event()

  def refresh():  # as the holder does: a new record renamed over the old one
    while not stop.is_set():
      helpers.write_lock(str(tmp_path / "next"), 7, host="live-pod", heartbeat=time.time())
      os.replace(tmp_path / "next" / io.LOCK_NAME, os.path.join(directory, io.LOCK_NAME))
      stop.wait(0.2)

  helpers.write_lock(directory, 7, host="live-pod", heartbeat=time.time())
  refresher = threading.Thread(target=refresh)
  refresher.start()
  try:
    with pytest.raises(io.DirectoryInUseError, match="in use by run_pretraining \\(pid 7 on "
                                                     "live-pod"):
      with io.directory_lock(directory, "run_pretraining"):
        pass
  finally:
    stop.set()
    refresher.join()


def test_the_holder_refreshes_its_lock_and_the_variable_is_checked(tmp_path, monkeypatch):
  import json  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  directory = str(tmp_path / "run")
  path = os.path.join(directory, io.LOCK_NAME)
  monkeypatch.setenv("BERT_TF_LOCK_STALE_SECONDS", "0.4")  # a refresh every 0.1 s
  with io.directory_lock(directory, "run_pretraining"):
    with open(path) as f:
      first = json.load(f)["heartbeat"]
    time.sleep(0.5)
    with open(path) as f:
      record = json.load(f)
    assert record["heartbeat"] > first + 0.2 and record["pid"] == os.getpid()
  assert not os.path.exists(path)
  assert not [n for n in os.listdir(directory) if n.startswith(io.LOCK_NAME)]
  for bad in ("0", "-3", "soon"):
    monkeypatch.setenv("BERT_TF_LOCK_STALE_SECONDS", bad)
    with pytest.raises(ValueError, match="BERT_TF_LOCK_STALE_SECONDS must be a positive"):
      with io.directory_lock(directory, "run_pretraining"):
        pass


def test_a_killed_runs_lock_is_taken_over_and_released(tmp_path):
  directory = str(tmp_path / "run")
  helpers.write_lock(directory, _dead_pid())
  with io.directory_lock(directory, "run_pretraining"):
    with open(os.path.join(directory, io.LOCK_NAME)) as f:
      assert f'"pid": {os.getpid()}' in f.read()
    # The holder may take it again (train, then predict, in one process).
    with io.directory_lock(directory, "run_pretraining"):
      pass
    assert os.path.exists(os.path.join(directory, io.LOCK_NAME))
  assert not os.path.exists(os.path.join(directory, io.LOCK_NAME))


def test_two_processes_cannot_hold_one_directory(tmp_path):
  import time  # pylint: disable=g-import-not-at-top
  directory = str(tmp_path / "run")
  holder = subprocess.Popen(
      [sys.executable, "-c", "import sys, time; from bert_tf import io\n"
       "with io.directory_lock(sys.argv[1], 'holder'):\n"
       "  print('held', flush=True); time.sleep(60)", directory],
      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
      stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(io.DirectoryInUseError, match=f"holder \\(pid {holder.pid} "):
      with io.directory_lock(directory, "second"):
        pass
  finally:
    holder.kill()
    holder.wait()
  time.sleep(0.1)
  with io.directory_lock(directory, "second"):  # its holder was killed: taken over
    pass


def test_read_json_object_is_none_unless_a_json_object(tmp_path, caplog):
  (tmp_path / "info.json").write_text('{"do_lower_case": true}')
  (tmp_path / "list.json").write_text("[1, 2]")
  (tmp_path / "broken.json").write_text("{not json")
  (tmp_path / "folder.json").mkdir()
  assert io.read_json_object(str(tmp_path / "info.json")) == {"do_lower_case": True}
  for name in ("missing.json", "list.json", "folder.json"):
    assert io.read_json_object(str(tmp_path / name)) is None
  assert not caplog.records
  assert io.read_json_object(str(tmp_path / "broken.json"), "not used") is None
  assert [r.getMessage() for r in caplog.records] == [
      f"{tmp_path / 'broken.json'} is not valid JSON; not used"]


def test_dirname_is_the_folder_before_the_last_slash():
  assert io.dirname("gs://bucket/run/model.ckpt-5") == "gs://bucket/run"
  assert io.dirname("out/bert_model.ckpt") == "out"
  assert io.dirname("bert_model.ckpt") == "."
