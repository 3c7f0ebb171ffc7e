"""create_pretraining_data: reference mode vs default mode vs the original's measured figures.

For each corpus size, builds a corpus of about that many MB from the input files (whole lines,
cut at the first document boundary after the size; the inputs over again when they hold less), then runs
`data_prep/create_pretraining_data.py` on it as a subprocess in reference mode
(--reproduce_original) and in default mode, and prints per run: instances, wall seconds,
instances/s, CPU seconds (the process and its workers), peak RSS of the largest process and of
the whole process tree, and the summary figures; then a table of ratios against the original's
figures of ORIGINAL_RELEASE.md section 9 (max_seq_length 128, dupe_factor 5).

Usage (from the repository root):
  python benchmarks/pretraining_data.py --sizes_mb=5,20

The inputs default to the repository's two English corpora (9.5 MB, benchmarks/corpora.py) and
the bert-base-uncased vocab; --input_files and --vocab_file take others.

The machine may be shared: CPU seconds are less sensitive to load than wall time.

The rows go to benchmarks/results/pretraining_data_DATE.json (benchmarks/results_file.py);
--smoke runs both modes once on 0.02 MB of tests/data/cpd_austen_100k.txt (dupe_factor 1) in a
temporary folder.
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpora  # pylint: disable=g-import-not-at-top,wrong-import-position
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, "data_prep", "create_pretraining_data.py")

# ORIGINAL_RELEASE.md section 9: input MB -> (instances, wall seconds, peak RSS MB).
ORIGINAL = {1: (13393, 21.5, 756), 5: (66973, 72.1, 951), 20: (269974, 257.7, 1678)}

DEFAULT_INPUTS = ",".join(corpora.paths())

SUMMARY_PATTERNS = {
    "instances": r"instances\s+([\d,]+)",
    "mean_length": r"mean length\s+([\d.]+)",
    "full_length": r"full-length fraction\s+([\d.]+)%",
    "mean_masked": r"mean masked tokens\s+([\d.]+)",
    "random_next": r"random-next fraction\s+([\d.]+)%",
}


def expand_inputs(patterns):
  """--input_files: comma-separated globs -> their files, each glob's sorted."""
  input_files = []
  for pattern in filter(None, (p.strip() for p in patterns.split(","))):
    matches = sorted(glob.glob(pattern))
    if not matches:
      raise SystemExit(f"--input_files: no file matches {pattern!r}")
    input_files += matches
  return input_files


def build_corpus(input_files, size_mb, path, repeat=False):
  """Writes the first ~size_mb MB of the concatenated inputs (over again with repeat), ending
  at a blank line."""
  limit = int(size_mb * 1e6)
  written = 0
  with open(path, "wb") as out:
    for _ in range(10**6 if repeat else 1):
      for name in input_files:
        with open(name, "rb") as f:
          for line in f:
            out.write(line)
            written += len(line)
            if written >= limit and not line.strip():
              return written
        out.write(b"\n")  # files are separate documents
        written += 1
      if written >= limit:
        break
  if written < limit:
    print(f"note: the inputs hold only {written / 1e6:.1f} MB, less than {size_mb} MB",
          file=sys.stderr)
  return written


class TreeMemory(threading.Thread):
  """Samples the summed RSS of a process and its descendants (psutil) until it ends."""

  def __init__(self, pid, interval=0.1):
    super().__init__(daemon=True)
    self.pid, self.interval = pid, interval
    self.peak_total = 0
    self.done = threading.Event()

  def run(self):
    try:
      import psutil  # pylint: disable=g-import-not-at-top
      root = psutil.Process(self.pid)
    except Exception:  # pylint: disable=broad-except
      return  # no psutil, or the process already ended: only the largest-process figure
    while not self.done.is_set():
      total = 0
      try:
        for proc in [root] + root.children(recursive=True):
          try:
            total += proc.memory_info().rss
          except Exception:  # pylint: disable=broad-except
            pass  # a worker that just ended
      except Exception:  # pylint: disable=broad-except
        break
      self.peak_total = max(self.peak_total, total)
      time.sleep(self.interval)


def run_once(args, corpus_path, output_path, reference, seed):
  """Runs the command once; returns a dict of measurements and summary figures."""
  command = [sys.executable, SCRIPT, f"--input_file={corpus_path}",
             f"--output_file={output_path}", f"--vocab_file={args.vocab_file}",
             f"--max_seq_length={args.max_seq_length}",
             f"--max_predictions_per_seq={args.max_predictions_per_seq}",
             f"--dupe_factor={args.dupe_factor}", f"--random_seed={seed}",
             "--overwrite", "--logtostderr", "--verbosity=-1"]
  if reference:
    command.append("--reproduce_original")
  elif args.num_workers:
    command.append(f"--num_workers={args.num_workers}")
  start = time.time()
  proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT)
  sampler = TreeMemory(proc.pid)
  sampler.start()
  # Read the pipes in threads so a chatty process cannot block; wait4 gives the exit status
  # and the rusage of the process together with every descendant it waited for.
  streams = {}
  readers = [threading.Thread(target=lambda n, s: streams.__setitem__(n, s.read()), args=(n, s))
             for n, s in (("out", proc.stdout), ("err", proc.stderr))]
  for reader in readers:
    reader.start()
  _, status, usage = os.wait4(proc.pid, 0)
  wall = time.time() - start
  sampler.done.set()
  for reader in readers:
    reader.join()
  proc.returncode = os.waitstatus_to_exitcode(status)
  stdout = streams["out"].decode("utf-8", "replace")
  if proc.returncode != 0:
    raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n"
                     f"{streams['err'].decode('utf-8', 'replace')[-3000:]}")
  result = {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
            "max_rss_mb": usage.ru_maxrss / 1024,  # KiB on Linux
            "tree_rss_mb": sampler.peak_total / 2**20}
  for key, pattern in SUMMARY_PATTERNS.items():
    match = re.search(pattern, stdout)
    if not match:
      raise SystemExit(f"no '{key}' in the summary:\n{stdout}")
    result[key] = float(match.group(1).replace(",", ""))
  result["instances_per_s"] = result["instances"] / wall
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--input_files", default=DEFAULT_INPUTS,
                      help="Comma-separated files or globs, concatenated in this order (and repeated).")
  parser.add_argument("--vocab_file",
                      default=corpora.VOCAB_FILE)
  parser.add_argument("--sizes_mb", default="5,20", help="Comma-separated corpus sizes in MB.")
  parser.add_argument("--modes", default="reference,default",
                      help="reference, default, or both (comma-separated).")
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--max_predictions_per_seq", type=int, default=20)
  parser.add_argument("--dupe_factor", type=int, default=5)
  parser.add_argument("--random_seeds", default="12345",
                      help="Comma-separated seeds; each mode runs once per seed. The summary "
                           "figures of one seed vary by a point or more on a small corpus "
                           "(few documents), so compare modes over several seeds.")
  parser.add_argument("--num_workers", type=int, default=0,
                      help="Default mode's --num_workers (0 = all cores).")
  parser.add_argument("--work_dir", default="",
                      help="Where corpora and outputs go (default: a temporary folder).")
  results_file.add_arguments(parser)
  args = parser.parse_args()
  if args.smoke:
    args.input_files, args.sizes_mb, args.dupe_factor = corpora.AUSTEN_100K, "0.02", 1
    args.random_seeds, args.num_workers = "12345", 1

  input_files = expand_inputs(args.input_files)
  sizes = [float(s) for s in args.sizes_mb.split(",") if s.strip()]
  seeds = [int(s) for s in args.random_seeds.split(",") if s.strip()]
  modes = [m.strip() for m in args.modes.split(",") if m.strip()]
  for mode in modes:
    if mode not in ("reference", "default"):
      raise SystemExit(f"--modes: unknown mode {mode!r}")

  work_dir = args.work_dir or tempfile.mkdtemp(prefix="bench_cpd_")
  os.makedirs(work_dir, exist_ok=True)
  print(f"cpu cores {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}, "
        f"dupe_factor {args.dupe_factor}, max_seq_length {args.max_seq_length}, "
        f"work_dir {work_dir}")
  rows = []
  for size in sizes:
    corpus_path = os.path.join(work_dir, f"corpus_{size:g}mb.txt")
    actual = build_corpus(input_files, size, corpus_path, repeat=True)
    for seed in seeds:
      for mode in modes:
        output = os.path.join(work_dir, f"{mode}_{size:g}mb.tfrecord")
        result = run_once(args, corpus_path, output, reference=mode == "reference", seed=seed)
        result.update(size=size, actual_mb=actual / 1e6, mode=mode, seed=seed)
        rows.append(result)
        print(f"  {size:g} MB {mode} seed {seed}: {result['instances']:,.0f} instances in "
              f"{result['wall']:.1f} s", flush=True)

  print()
  print("| input | mode | seed | instances | wall s | instances/s | CPU s | largest process MB "
        "| process tree MB | mean length | full-length | mean masked | random-next |")
  print("| --- | --- |" + " ---: |" * 11)
  for size in sizes:
    if args.max_seq_length == 128 and args.dupe_factor == 5 and size in ORIGINAL:
      instances, wall, rss = ORIGINAL[size]
      print(f"| {size:g} MB | original (spec s. 9) | 12345 | {instances:,} | {wall:.1f} | "
            f"{instances / wall:,.0f} | - | {rss:,} | - | - | - | - | - |")
    for r in (r for r in rows if r["size"] == size):
      print(f"| {r['actual_mb']:.1f} MB | {r['mode']} | {r['seed']} | {r['instances']:,.0f} | "
            f"{r['wall']:.1f} | "
            f"{r['instances_per_s']:,.0f} | {r['cpu']:.1f} | {r['max_rss_mb']:,.0f} | "
            f"{r['tree_rss_mb']:,.0f} | {r['mean_length']:.1f} | {r['full_length']:.1f}% | "
            f"{r['mean_masked']:.2f} | {r['random_next']:.1f}% |")

  if len(seeds) > 1:
    print()
    print(f"Summary figures over {len(seeds)} seeds: mean (min - max)")
    print("| input | mode | instances | mean length | full-length % | mean masked | "
          "random-next % |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for size in sizes:
      for mode in modes:
        group = [r for r in rows if r["size"] == size and r["mode"] == mode]
        cells = []
        for key, fmt in (("instances", ",.0f"), ("mean_length", ".1f"), ("full_length", ".1f"),
                         ("mean_masked", ".2f"), ("random_next", ".1f")):
          values = [r[key] for r in group]
          cells.append(f"{sum(values) / len(values):{fmt}} ({min(values):{fmt}} - "
                       f"{max(values):{fmt}})")
        print(f"| {size:g} MB | {mode} | " + " | ".join(cells) + " |")

  comparable = [r for r in rows if r["size"] in ORIGINAL and args.max_seq_length == 128
                and args.dupe_factor == 5]
  if comparable:
    print()
    print("Ratios against the original: instances/s, instances per CPU second, and peak RSS of "
          "the largest process:")
    print("| input | mode | seed | speed vs original | CPU-time speed vs original "
          "| memory vs original |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for r in comparable:
      instances, wall, rss = ORIGINAL[r["size"]]
      original_speed = instances / wall  # one process: its wall time is about its CPU time
      print(f"| {r['size']:g} MB | {r['mode']} | {r['seed']} | "
            f"{r['instances_per_s'] / original_speed:.1f}x | "
            f"{r['instances'] / r['cpu'] / original_speed:.1f}x | "
            f"{r['max_rss_mb'] / rss:.2f}x |")
  results_file.write("pretraining_data", dict(
      settings=dict(max_seq_length=args.max_seq_length, dupe_factor=args.dupe_factor,
                    max_predictions_per_seq=args.max_predictions_per_seq,
                    num_workers=args.num_workers, seeds=seeds, modes=modes),
      original={f"{size:g}": dict(zip(("instances", "wall", "max_rss_mb"), figures))
                for size, figures in ORIGINAL.items()},
      rows=rows), args.smoke, args.results_file)


if __name__ == "__main__":
  main()
