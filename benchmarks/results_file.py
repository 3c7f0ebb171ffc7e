"""The results file every benchmark script writes, and the flags of its smoke mode.

A results file is one JSON object per run:

  benchmark  the script's name (serving, tokenization, ...)
  command    the command line, as `python benchmarks/NAME.py FLAGS`
  date       the day the run ended (UTC, YYYY-MM-DD); written: the time, ISO 8601
  smoke      whether it was a --smoke run (a check that the script runs, not a measurement)
  machine    CPU model, the SIMD flags that choose TensorFlow's kernels, cores (and the ones
             the process may use), the load average when written, memory, OS, Python
  versions   the installed versions of the packages a benchmark's figures depend on (a package
             that is not installed is left out)
  results    what the script measured: its rows, ratios and settings, as the script names them

Without --results_file a measured run writes benchmarks/results/NAME_DATE.json (the files the
benchmarks page is rendered from: benchmarks/render.py); a --smoke run writes into a new
temporary folder, never beside the committed files. The file is written to a temporary name
and renamed, so a run that fails leaves no partial file.

--smoke everywhere means: a tiny random-weight model or a few lines of text, a few steps, one
round, outputs in a temporary folder; seconds beyond TensorFlow's import. Peers that need
torch and transformers (the benchmark extra, not the test extra CI installs) are left out of a
smoke run, with a printed line saying so.
"""

import datetime
import importlib.metadata
import json
import os
import platform
import re
import sys
import tempfile

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(BENCHMARKS, "results")

# The packages whose versions a figure depends on (distribution names).
PACKAGES = ("bert_tf", "tensorflow", "keras", "tensorflow-text", "numpy", "tf-models-official",
            "tf-keras", "torch", "transformers", "onnxruntime", "apache-beam", "tokenizers")
# The SIMD flags that decide which kernels TensorFlow's oneDNN and torch run.
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
# Systems that need torch (and transformers): left out of smoke runs.
TORCH_SYSTEM = re.compile(r"^hf|torch|hugging", re.I)


def add_arguments(parser) -> None:
  """--smoke and --results_file on an argparse parser."""
  parser.add_argument("--smoke", action="store_true",
                      help="seconds-long check that the script runs: a tiny model or a few lines, "
                           "one round, outputs in a temporary folder; peers that need torch are "
                           "left out")
  parser.add_argument("--results_file", default=None,
                      help="where the results JSON goes (default: benchmarks/results/"
                           "NAME_DATE.json; with --smoke a temporary folder)")


def define_flags(flags) -> None:
  """--smoke and --results_file as absl flags (absl.flags passed in)."""
  flags.DEFINE_bool("smoke", False, "Seconds-long check that the script runs: a tiny model or a "
                    "few lines, one round, outputs in a temporary folder; peers that need torch "
                    "are left out.")
  flags.DEFINE_string("results_file", None, "Where the results JSON goes (default: "
                      "benchmarks/results/NAME_DATE.json; with --smoke a temporary folder).")


def smoke_dir(name: str) -> str:
  """A new temporary folder for a smoke run's outputs."""
  return tempfile.mkdtemp(prefix=f"bert_tf_{name}_smoke_")


def without_torch(systems, smoke: bool, torch_systems=None) -> list:
  """`systems` less those that need torch when `smoke`, each left out with a printed line."""
  kept = []
  for system in systems:
    needs_torch = (system in torch_systems) if torch_systems is not None else bool(
        TORCH_SYSTEM.search(system))
    if smoke and needs_torch:
      print(f"smoke: {system} left out (it needs torch and transformers, which the benchmark "
            "extra installs and the test extra does not)", flush=True)
    else:
      kept.append(system)
  return kept


def machine() -> dict:
  """The CPU (model, SIMD flags), cores, memory, OS and Python of this machine."""
  facts = dict(cpu_model=platform.processor() or platform.machine(), cpus=os.cpu_count(),
               platform=platform.platform(), python=platform.python_version())
  if hasattr(os, "sched_getaffinity"):
    facts["affinity"] = sorted(os.sched_getaffinity(0))
  if hasattr(os, "getloadavg"):  # other work on the machine when the file was written
    facts["load_average"] = [round(load, 2) for load in os.getloadavg()]
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      info = f.read()
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    found = re.search(r"^flags\s*:\s*(.+)$", info, re.M)
    if model:
      facts["cpu_model"] = model.group(1).strip()
    if found:
      present = set(found.group(1).split())
      facts["cpu_flags"] = [flag for flag in CPU_FLAGS if flag in present]
    with open("/proc/meminfo", encoding="utf-8") as f:
      facts["memory_gb"] = round(int(f.readline().split()[1]) / 1024 ** 2, 1)
  except (OSError, ValueError, IndexError):
    pass  # not Linux: the model and cores above are what there is
  return facts


def versions() -> dict:
  """Installed versions of PACKAGES (read from their metadata, nothing imported)."""
  found = {}
  for package in PACKAGES:
    try:
      found[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      pass
  return found


def command(argv=None) -> str:
  """The command line of this run, as a user would type it from the repository root."""
  argv = sys.argv if argv is None else argv
  script = os.path.relpath(os.path.abspath(argv[0]), os.path.dirname(BENCHMARKS))
  return " ".join(["python", script] + list(argv[1:]))


def default_path(name: str, smoke: bool, date: str) -> str:
  if smoke:
    return os.path.join(smoke_dir(name), f"{name}_smoke_{date}.json")
  return os.path.join(RESULTS_DIR, f"{name}_{date}.json")


def record(name: str, results: dict, smoke: bool, argv=None) -> dict:
  """The results file's object for `results` measured by benchmark `name`."""
  now = datetime.datetime.now(datetime.timezone.utc)
  return dict(benchmark=name, command=command(argv), date=f"{now:%Y-%m-%d}",
              written=now.isoformat(timespec="seconds"), smoke=bool(smoke), machine=machine(),
              versions=versions(), results=results)


def write_json(path: str, content) -> None:
  """Writes `content` as indented JSON at `path`: to a temporary name first, then renamed."""
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  handle, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
  try:
    with os.fdopen(handle, "w", encoding="utf-8") as f:
      json.dump(content, f, indent=1, sort_keys=True, default=str)
      f.write("\n")
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write(name: str, results: dict, smoke: bool, results_file=None, argv=None) -> str:
  """Writes the results file of a run of benchmark `name` (record()) at `results_file`, or at
  default_path(); prints and returns its path."""
  content = record(name, results, smoke, argv)
  path = results_file or default_path(name, smoke, content["date"])
  write_json(path, content)
  print(f"results: {path}", flush=True)
  return path


def read(path: str) -> dict:
  with open(path, encoding="utf-8") as f:
    return json.load(f)
