"""slurm-rl's database (installed as slurm_rl.db): models, engine, migrations, data access.

Modules: `models` (schema), `kinds` (stored enums; no SQLAlchemy), `engine` (SQLite in WAL mode
with a busy timeout and foreign keys), `migrate` (Alembic from the installed package), `repo`
(jobs, progress, nodes, GPU samples), `actions` (decisions and the crash-safe action log),
`cli` (`slurm-rl db`). Nothing is imported here, so importing one module costs only that one.
"""
