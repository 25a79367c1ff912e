"""Dataset rows: read, checked and turned into what the rest of kitae uses.

    loader.py   prompt datasets (JSON Lines, Parquet, a saved ``datasets`` dataset) validated row by row; the one
                JSON-lines reader every command uses
    images.py   images in prompt rows: sources, checks on load, the forms graders and judges need

Nothing is imported here.
"""
