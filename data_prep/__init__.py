"""Data preparation: text corpora -> pretraining TFRecords (see create_pretraining_data.py)."""
