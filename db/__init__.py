"""slurm-rl's database (installed as slurm_rl.db): models, engine, migrations, data access.

Modules: `models` (schema), `kinds` (stored enums; no SQLAlchemy), `engine` (SQLite in WAL mode
with a busy timeout and foreign keys), `migrate` (Alembic from the installed package), `repo`
(jobs, progress, nodes, GPU samples, quarantined records), `actions` (decisions and the
crash-safe action log), `bounds` (values SQLite can hold), `guard` (is a file SQLite, ours, not
newer; one-line errors), `lock` (one daemon per database), `retention` (pruning in batches),
`cli` (`slurm-rl db`). Nothing is imported here, so importing one module costs only that one.
"""
