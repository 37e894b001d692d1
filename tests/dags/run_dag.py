"""Run one DAG of ``dags/`` with ``dag.test()`` in Airflow's own virtualenv, for tests/dags.

``python run_dag.py DAGS_FOLDER DAG_ID CONF_JSON`` (the metadata DB is the one of ``$AIRFLOW_HOME``,
migrated by the caller) prints, as its last line, ``RESULT {json}``: the run's state, each task's
state and each task's XCom return value. ``python run_dag.py DAGS_FOLDER --import-errors`` prints
the DagBag's DAG ids and import errors instead.
"""
from __future__ import annotations

import json
import sys
from typing import Any


def _bag(folder: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=folder)


def main(argv: list[str]) -> int:
    folder, what = argv[0], argv[1]
    bag = _bag(folder)
    if what == "--import-errors":
        print("RESULT " + json.dumps({"dags": sorted(bag.dags), "errors": bag.import_errors}))
        return 0
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    run = bag.dags[what].test(run_conf=json.loads(argv[2]))
    with create_session() as session:
        tis = {ti.task_id: ti.state for ti in run.get_task_instances(session=session)}
        rows = session.query(XComModel).filter(XComModel.dag_id == what, XComModel.run_id == run.run_id,
                                               XComModel.key == "return_value").all()
        xcoms = {r.task_id: r.value for r in rows}
    print("RESULT " + json.dumps({"state": str(run.state), "tasks": {k: str(v) for k, v in tis.items()},
                                  "xcom": xcoms}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
