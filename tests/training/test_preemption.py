"""SIGTERM during training (a preemptible VM, a TPU maintenance event, Kubernetes): the loop
stops after the current call of the step, saves the step reached and exits with
stopping.EXIT_PREEMPTED; the same command resumes from there (issue 38, point 1).

In process (the loop on a toy task, the signal sent to this process) and with the real
`python -m bert_tf.run_pretraining` in a subprocess.
"""

import itertools
import logging
import os
import re
import signal
import subprocess
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.training import distribution, loop, run_folder, stopping
from bert_tf.training import optimization
from bert_tf.training.errors import TrainingError
from tests import helpers
from tests.training.test_loop import _toy_data, _toy_task

NUM_STEPS = 30
SAVE_STEPS = 10
ITERATIONS_PER_LOOP = 3


def _toy_trainer(output_dir):
  keras.utils.set_random_seed(2)
  strategy = distribution.select_strategy("one_device")
  with strategy.scope():
    inputs = {"x": keras.Input((4,), name="x")}
    model = keras.Model(inputs, keras.layers.Dense(2, name="logits")(inputs["x"]))
    optimizer = optimization.create_optimizer("adamw", 0.1, NUM_STEPS, 0)
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
  trainer = loop.Trainer(strategy, model, optimizer, _toy_task(), train_batch_size=32)
  state = run_folder.checkpoint_state(model, optimizer, step, output_dir, True, strategy)
  iterator = distribution.resumed_iterator(strategy, lambda ctx: _toy_data(32), step)
  return trainer, step, state, iterator


def _train(trainer, step, state, iterator):
  return loop.train(trainer, iterator, step, state.manager, NUM_STEPS, ITERATIONS_PER_LOOP,
                    SAVE_STEPS, None, True)


def _sigterm_after(trainer, steps, sent=None):
  """Sends this process a SIGTERM at the end of the first call of the step that reaches
  `steps` steps in all; returns a list (`sent`, or a new one) that receives the step count at
  that moment."""
  original = trainer.train_loop
  sent = [] if sent is None else sent

  def train_loop(iterator, num_steps):
    result = original(iterator, num_steps)
    total = int(trainer.optimizer.iterations.numpy())
    if total >= steps and not sent:
      sent.append(total)
      os.kill(os.getpid(), signal.SIGTERM)
    return result

  trainer.train_loop = train_loop  # this instance only
  return sent


@pytest.mark.parametrize("signal_at", [11, NUM_STEPS])
def test_sigterm_saves_the_step_reached_and_a_resumed_run_ends_as_an_uninterrupted_one(
    tmp_path, signal_at, caplog):
  reference = _toy_trainer(str(tmp_path / "reference"))
  _train(*reference)
  before = signal.getsignal(signal.SIGTERM)

  trainer, step, state, iterator = _toy_trainer(str(tmp_path / "run"))
  sent = _sigterm_after(trainer, signal_at)
  with pytest.raises(stopping.Preempted) as stopped:
    _train(trainer, step, state, iterator)
  assert signal.getsignal(signal.SIGTERM) is before  # the previous handler is back
  reached = sent[0]
  # The signal came after the call that crossed signal_at: the run stops there, not at the next
  # periodic checkpoint, and not at the last one before.
  assert signal_at <= reached <= NUM_STEPS and int(step.numpy()) == reached
  if signal_at < NUM_STEPS:
    assert reached % SAVE_STEPS  # a step between two periodic checkpoints
  assert isinstance(stopped.value, SystemExit) and stopped.value.code == stopping.EXIT_PREEMPTED
  path = str(tmp_path / "run" / f"ckpt-{reached}")
  assert (stopped.value.step, stopped.value.checkpoint) == (reached, path)
  assert tf.train.latest_checkpoint(str(tmp_path / "run")) == path
  assert any(f"SIGTERM: stopped at step {reached}/{NUM_STEPS} and saved checkpoint {path} ("
             in r.getMessage() and f"resume from step {reached} (exit status 75)"
             in r.getMessage() for r in caplog.records)

  resumed = _toy_trainer(str(tmp_path / "run"))
  assert int(resumed[1].numpy()) == reached
  _train(*resumed)
  assert int(resumed[1].numpy()) == NUM_STEPS
  for a, b in zip(reference[0].model.get_weights(), resumed[0].model.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_call_of_the_step_is_cut_to_the_stop_check_time(tmp_path, monkeypatch, caplog):
  """iterations_per_loop far above the run's length: calls still end every few steps, and
  progress lines come on the way (every PROGRESS_SECONDS; here every call)."""
  calls = []
  trainer, step, state, iterator = _toy_trainer(str(tmp_path))
  original = trainer.train_loop

  def train_loop(iterator, num_steps):
    calls.append(int(num_steps))
    time.sleep(0.05 * int(num_steps))  # at least 0.05 s a step
    return original(iterator, num_steps)

  trainer.train_loop = train_loop
  monkeypatch.setenv(stopping.STOP_CHECK_ENV, "0.2")
  monkeypatch.setattr(stopping, "PROGRESS_SECONDS", 0.0)
  with caplog.at_level(logging.INFO):
    loop.train(trainer, iterator, step, state.manager, NUM_STEPS, 10 ** 6, 10 ** 6, None, True)
  assert int(step.numpy()) == NUM_STEPS == sum(calls)
  assert calls[0] == 1 and max(calls) <= 4  # at most 4 steps of 0.05 s in 0.2 s
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
  reached = [int(line.split()[1].split("/")[0]) for line in lines]
  assert reached == list(itertools.accumulate(calls)), lines  # one line per call, in order
  assert all(f"/{NUM_STEPS} loss = " in line and " ETA " in line for line in lines)
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith(f"ckpt-{NUM_STEPS}")


def test_the_exit_status_is_the_commands_documented_one():
  from bert_tf import cli  # pylint: disable=g-import-not-at-top
  assert stopping.EXIT_PREEMPTED == cli.EXIT_PREEMPTED == 75
  assert stopping.Preempted(3, "ckpt-3").code == 75


def test_non_finite_steps_in_a_row_are_counted_across_calls(tmp_path):
  """Non-finite steps from step 7 on, 5 allowed in a row (float16 loss scaling): calls of 3
  steps see 3, then 2 of them; the run stops at step 11 as one call of 5 steps would."""
  trainer, step, state, iterator = _toy_trainer(str(tmp_path))
  trainer.max_nonfinite_steps = 5
  done, calls = [0], []

  def train_loop(iterator, num_steps):
    del iterator
    first, count = done[0] + 1, int(num_steps)
    done[0] += count
    calls.append(count)
    bad = sum(1 for s in range(first, first + count) if s >= 7)  # all at the call's end
    return (tf.constant(count), tf.constant(bad),
            {k: tf.constant(1.0) for k in ("loss", "correct", "examples")})

  trainer.train_loop = train_loop
  with pytest.raises(TrainingError, match=r"non-finite loss at step 11 \(5 in a row\)"):
    loop.train(trainer, iterator, step, state.manager, NUM_STEPS, ITERATIONS_PER_LOOP, 100,
               None, True)
  assert int(step.numpy()) == 11 and calls[-1] == 2


def test_stop_check_seconds_variable(monkeypatch):
  monkeypatch.delenv(stopping.STOP_CHECK_ENV, raising=False)
  assert stopping.stop_check_seconds() == stopping.DEFAULT_STOP_CHECK_SECONDS == 5
  monkeypatch.setenv(stopping.STOP_CHECK_ENV, "0.5")
  assert stopping.stop_check_seconds() == 0.5
  for text in ("0", "-1", "soon", "nan", "inf"):
    monkeypatch.setenv(stopping.STOP_CHECK_ENV, text)
    with pytest.raises(TrainingError, match="BERT_TF_STOP_CHECK_SECONDS="):
      stopping.stop_check_seconds()


# === The command, in a subprocess ===


_command = helpers.pretraining_command


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  return helpers.write_pretraining_inputs(str(tmp_path_factory.mktemp("preemption")))


def _read_until(process, line_has, lines, timeout=240):
  """Reads the process's output into `lines` until a line holds `line_has`."""
  deadline = time.time() + timeout
  for line in process.stdout:
    lines.append(line)
    if line_has in line:
      break
    assert time.time() < deadline, "".join(lines)[-3000:]
  assert process.poll() is None, "the run ended before the signal: " + "".join(lines)[-3000:]


# Error-level lines of absl (Python and C++) and of TensorFlow's C++ logging.
_ERROR_LINE = re.compile(r"^(E\d{4} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [EF] )")


def error_lines(output):
  """The lines of a command's output that report an error (none on a clean run)."""
  return [line for line in output.splitlines()
          if _ERROR_LINE.match(line) or "Traceback" in line or ": error:" in line]


def _popen(args, **env):
  return subprocess.Popen(args, cwd=helpers.REPO_ROOT, env=helpers.subprocess_env(**env),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(process, lines, timeout=120):
  try:
    lines.append(process.communicate(timeout=timeout)[0])
  finally:
    if process.poll() is None:
      process.kill()
  return "".join(lines)


COMMAND_STEPS = 100
# A log line every 5 steps, a checkpoint every 20: the signal goes after "step 25/100".
PREEMPTED_RUN = (f"--num_train_steps={COMMAND_STEPS}", "--save_checkpoints_steps=20",
                 "--iterations_per_loop=5")


@pytest.mark.slow
def test_sigterm_to_run_pretraining_saves_exits_75_and_the_same_command_resumes(workdir,
                                                                                 tmp_path):
  # The uninterrupted run, meanwhile.
  reference_dir = str(tmp_path / "reference")
  reference = _popen(_command(workdir, reference_dir, *PREEMPTED_RUN))
  run_dir = str(tmp_path / "run")
  lines = []
  process = _popen(_command(workdir, run_dir, *PREEMPTED_RUN))
  try:
    _read_until(process, f"step 25/{COMMAND_STEPS} ", lines)
    process.send_signal(signal.SIGTERM)
    output = _finish(process, lines)
  finally:
    reference_output = _finish(reference, [], timeout=240)
  assert reference.returncode == 0, reference_output[-3000:]
  assert process.returncode == stopping.EXIT_PREEMPTED == 75, output[-3000:]
  stopped = [line for line in output.splitlines() if "SIGTERM: stopped at step" in line]
  assert len(stopped) == 1, output[-3000:]
  reached = int(stopped[0].split("SIGTERM: stopped at step ")[1].split("/")[0])
  assert 25 <= reached < COMMAND_STEPS
  latest = os.path.join(run_dir, f"ckpt-{reached}")
  assert (f"and saved checkpoint {latest} (" in stopped[0] and
          f"run the same command again to resume from step {reached} (exit status 75)"
          in stopped[0]), stopped[0]
  assert tf.train.latest_checkpoint(run_dir) == latest
  helpers.checkpoint_values(latest)  # whole: it loads
  assert error_lines(output) == [], output[-3000:]

  resumed = subprocess.run(_command(workdir, run_dir, *PREEMPTED_RUN), cwd=helpers.REPO_ROOT,
                           env=helpers.subprocess_env(), capture_output=True, text=True,
                           timeout=240)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"Resuming from {latest}\n" in resumed.stderr
  assert f"steps (from step {reached})" in resumed.stderr
  assert f"Finished at step {COMMAND_STEPS}" in resumed.stderr
  final = tf.train.latest_checkpoint(run_dir)
  assert final == os.path.join(run_dir, f"ckpt-{COMMAND_STEPS}")
  # The resumed run saw the batches the uninterrupted one did, from where the first stopped.
  expected = helpers.checkpoint_values(os.path.join(reference_dir, f"ckpt-{COMMAND_STEPS}"))
  got = helpers.checkpoint_values(final)
  for name, value in expected.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.slow
def test_sigterm_is_seen_within_the_stop_check_time_with_long_loops(workdir, tmp_path):
  """iterations_per_loop and save_checkpoints_steps beyond the run: the loop of yesterday ran
  the whole run in one call and SIGTERM killed it with nothing saved."""
  run_dir = str(tmp_path / "run")
  lines = []
  steps = 10 ** 6
  process = _popen(_command(workdir, run_dir, f"--num_train_steps={steps}",
                            f"--save_checkpoints_steps={steps}",
                            f"--iterations_per_loop={steps}"),
                   BERT_TF_STOP_CHECK_SECONDS="1")
  _read_until(process, "Training: global batch 8", lines)
  # Let it train a while, then signal. The first call is one step that traces and compiles,
  # and logs nothing: 3-6 s here, but 13 s once on a slow, shared machine, where a signal
  # sent 4 s in waited for it. After 12 s the calls are of about a second each.
  time.sleep(12)
  sent = time.time()
  process.send_signal(signal.SIGTERM)
  output = _finish(process, lines, timeout=60)
  ended = time.time() - sent
  assert process.returncode == 75, output[-3000:]
  reached = tf.train.latest_checkpoint(run_dir)
  assert reached is not None, output[-3000:]
  step = int(reached.rsplit("-", 1)[1])
  assert step > 0
  assert f"step {step}/{steps} loss = " in output  # the metrics of the steps since the last log
  seconds = float(output.split(f"saved checkpoint {reached} (")[1].split(" s after")[0])
  # One call (about 1 s here) and the save; the process ends soon after.
  assert seconds < 10 and ended < 30, output[-3000:]


def _start_workers(workdir, output_dir, ports, logs, *extra):
  return helpers.start_workers(_command(workdir, output_dir, *extra), ports, logs)


_wait_all = helpers.wait_all
_read = helpers.read_text


@pytest.mark.slow
def test_sigterm_to_one_of_two_workers_stops_both_at_the_same_step(workdir, tmp_path):
  from tests.training.test_distributed import _free_ports  # pylint: disable=g-import-not-at-top
  run_dir = str(tmp_path / "run")
  logs = [str(tmp_path / "worker0.log"), str(tmp_path / "worker1.log")]
  ports = _free_ports(2)
  workers = _start_workers(workdir, run_dir, ports, logs, *PREEMPTED_RUN)
  try:
    helpers.wait_for_line(logs[0], f"step 25/{COMMAND_STEPS} ", workers[0])
    workers[1].send_signal(signal.SIGTERM)  # the other worker is not signalled
  finally:
    codes = _wait_all(workers)
  outputs = [_read(log) for log in logs]
  assert codes == [75, 75], outputs[0][-2000:] + outputs[1][-2000:]
  stopped = [[line for line in output.splitlines() if "SIGTERM: stopped at step" in line]
             for output in outputs]
  assert [len(lines) for lines in stopped] == [1, 1], outputs
  reached = int(stopped[0][0].split("SIGTERM: stopped at step ")[1].split("/")[0])
  latest = os.path.join(run_dir, f"ckpt-{reached}")
  for lines in stopped:  # the same step and the chief's checkpoint, on both workers
    assert f"stopped at step {reached}/{COMMAND_STEPS} and saved checkpoint {latest} (" \
        in lines[0]
  assert "(another worker got SIGTERM)" in stopped[0][0]
  assert " s after the signal)" in stopped[1][0]
  assert 25 <= reached < COMMAND_STEPS
  assert tf.train.latest_checkpoint(run_dir) == latest
  assert not os.path.exists(os.path.join(run_dir, ".worker_1_tmp"))
  for output in outputs:
    assert error_lines(output) == [], output[-3000:]

  # Relaunched as it was: both resume from the step reached and finish.
  workers = _start_workers(workdir, run_dir, ports, logs, *PREEMPTED_RUN)
  codes = _wait_all(workers)
  outputs = [_read(log) for log in logs]
  assert codes == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
  assert f"Resuming from {latest}\n" in outputs[0]
  for output in outputs:
    assert f"steps (from step {reached})" in output
    assert f"Finished at step {COMMAND_STEPS}" in output
  assert tf.train.latest_checkpoint(run_dir) == os.path.join(run_dir, f"ckpt-{COMMAND_STEPS}")


def _classifier_command(directory, output_dir):
  return helpers.tiny_classifier_command(
      directory, output_dir, "--do_train", "--do_eval", "--do_predict", "--num_train_epochs=2",
      "--seed=3", "--iterations_per_loop=5", "--save_checkpoints_steps=1000")


@pytest.mark.slow
def test_sigterm_to_run_classifier_saves_exits_75_and_the_same_command_resumes(tmp_path):
  """A fine-tuning command takes the signal as run_pretraining does: the step reached is saved
  (no periodic checkpoint before it here), exit 75, and the same command resumes from it to
  the end, evaluates, predicts and exports. (That the resumed weights equal an uninterrupted
  run's is tested in process: classifier/test_run.py,
  test_an_interrupted_fine_tuning_resumes_to_the_same_weights.) The resumed run, in a user's
  environment, also shows that a whole run prints only its own lines (bert_tf/logs.py)."""
  total = int(360 / 16 * 2)  # the original's count: train examples / batch * epochs
  run_dir = str(tmp_path / "run")
  lines = []
  process = _popen(_classifier_command(tmp_path, run_dir))
  _read_until(process, f"step 10/{total} ", lines)
  process.send_signal(signal.SIGTERM)
  output = _finish(process, lines)
  assert process.returncode == 75, output[-3000:]
  stopped = [line for line in output.splitlines() if "SIGTERM: stopped at step" in line]
  assert len(stopped) == 1, output[-3000:]
  reached = int(stopped[0].split("SIGTERM: stopped at step ")[1].split("/")[0])
  assert 10 <= reached < total
  latest = os.path.join(run_dir, f"ckpt-{reached}")
  assert tf.train.latest_checkpoint(run_dir) == latest
  assert error_lines(output) == [], output[-3000:]

  resumed = subprocess.run(_classifier_command(tmp_path, run_dir), cwd=helpers.REPO_ROOT,
                           env=helpers.user_env(), capture_output=True, text=True, timeout=240)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"Resuming from {latest}" in resumed.stderr
  assert tf.train.latest_checkpoint(run_dir) == os.path.join(run_dir, f"ckpt-{total}")
  # Progress, results and the export, and none of TensorFlow's routine lines.
  assert helpers.noise_lines(resumed.stderr) == [], resumed.stderr[-3000:]
  for ours in (f"step {total}/{total} loss = ", "examples/s = ", "ETA ",
               "] ***** Eval results *****", "]   eval_accuracy = ",
               "] Wrote 60 predictions to ", "] Exported the classifier for TF Serving to "):
    assert ours in resumed.stderr, ours
  assert os.path.isdir(os.path.join(run_dir, "export", "classifier", str(total)))


# === Every fine-tuning command, in process ===


def _run_squad(output_dir):
  """The SQuAD tests' tiny run without dropout: 2 epochs, 50 steps, a checkpoint every 20."""
  from tests.tasks.squad import test_run as test_squad_run  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.squad import run as squad_run  # pylint: disable=g-import-not-at-top
  config = test_squad_run.CONFIG.replace(hidden_dropout_prob=0.0,
                                         attention_probs_dropout_prob=0.0)
  return squad_run.run_squad(config, test_squad_run.squad_settings(
      output_dir, do_predict=False, num_train_epochs=2.0, iterations_per_loop=4))


def _run_ner(output_dir):
  """The tagging tests' tiny run without dropout: 1 epoch, 46 steps, a checkpoint every 20."""
  # pylint: disable-next=g-import-not-at-top
  from tests.tasks.tagging import test_run as test_tagging_run
  from bert_tf.tasks.tagging import run as tagging_run  # pylint: disable=g-import-not-at-top
  config = test_tagging_run.CONFIG.replace(hidden_dropout_prob=0.0,
                                           attention_probs_dropout_prob=0.0)
  return tagging_run.run_ner(config, test_tagging_run.settings(
      output_dir, do_train=True, num_train_epochs=1.0, iterations_per_loop=4,
      save_checkpoints_steps=20))


def _signalling_trainer(steps, sent):
  """loop.Trainer, but this process gets a SIGTERM at the end of the first call of the step
  that reaches `steps` steps in all (the step count is appended to `sent`)."""

  class SignallingTrainer(loop.Trainer):

    def __init__(self, *args, **kwargs):
      super().__init__(*args, **kwargs)
      _sigterm_after(self, steps, sent)

  return SignallingTrainer


@pytest.mark.slow
@pytest.mark.parametrize("run", [_run_squad, _run_ner], ids=["run_squad", "run_ner"])
def test_sigterm_to_a_fine_tuning_run_saves_the_step_and_the_resumed_run_ends_the_same(
    tmp_path, monkeypatch, run):
  """run_squad and run_ner take the signal as run_classifier does (its subprocess test above):
  the step reached is saved between two periodic checkpoints, the run stops with exit status
  75 and leaves its folder, and running it again ends with the uninterrupted run's weights
  (dropout off)."""
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  whole = run(str(tmp_path / "whole"))
  total = whole["global_step"]
  assert total > 20  # past the periodic checkpoint at step 20

  sent = []
  run_dir = str(tmp_path / "run")
  with monkeypatch.context() as patch:
    patch.setattr(loop, "Trainer", _signalling_trainer(21, sent))
    with pytest.raises(stopping.Preempted) as stopped:
      run(run_dir)
  reached = sent[0]
  assert 21 <= reached < total and reached % 20
  assert stopped.value.code == stopping.EXIT_PREEMPTED == 75
  latest = os.path.join(run_dir, f"ckpt-{reached}")
  assert (stopped.value.step, stopped.value.checkpoint) == (reached, latest)
  assert tf.train.latest_checkpoint(run_dir) == latest
  assert os.path.exists(os.path.join(run_dir, "task_info.json"))  # the folder is kept

  resumed = run(run_dir)
  assert resumed["global_step"] == total
  expected = checkpoints.get_original_weights(whole["model"])
  got = checkpoints.get_original_weights(resumed["model"])
  assert sorted(got) == sorted(expected)
  for name, value in expected.items():
    np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
