"""The one export convention of the training commands: what a command hands its run, and where
the run's exports go.

run_pretraining, run_classifier, run_squad and run_ner all export the same way: the command
hands its run an `Exporter` (the run never imports serving code: training and tasks/*_run.py
stay below it), and after training the run's chief calls

    exporter.export(model, config, settings, info, version=step) -> the directory written

with the trained model (any dtype policy, possibly under a strategy: the export builds its own
float32 copy, once), the run's config and settings, what the run records (`info`: the
task_info.json of a fine-tuning run, the data's metadata of a pretraining run) and the global
step as the version. Every export goes under <output_dir>/EXPORT_DIR/ at `export_path`:

    <output_dir>/export/<model_name>/<step>/   a fine-tuned model, in TF Serving's layout
    <output_dir>/export/<step>/                run_pretraining's exports (model_name ""): its
                                               plain SavedModels, and its TF Serving models
                                               under serving/

docs/export.md describes what each holds.

Model tier (the foundation's io only), so serving, training and tasks all read it.
"""

from typing import Any, Callable, NamedTuple

from bert_tf import io

EXPORT_DIR = "export"


class Exporter(NamedTuple):
  """The export a command hands to its run.

  Attributes:
    model_name: the folder under <output_dir>/export/ that the versions go to ("classifier",
      "squad", "ner"); "" for run_pretraining, whose exports go to <output_dir>/export/<step>/.
    export: (model, config, settings, info, version) -> the directory written, which is
      export_path(settings.output_dir, model_name, version).
  """
  model_name: str
  export: Callable[..., str]


def export_path(output_dir: str, model_name: str, version: Any) -> str:
  """<output_dir>/export/<model_name>/<version> (<output_dir>/export/<version> without a
  model name): where an Exporter writes the export of a run's step `version`."""
  path = io.join(output_dir, EXPORT_DIR)
  if model_name:
    path = io.join(path, model_name)
  return io.join(path, str(version))
