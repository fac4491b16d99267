"""bench/routing/wide_ex.py's merged database must answer like the small ones it merges."""

from __future__ import annotations

import sqlite3


def test_merge_keeps_every_row_and_the_files_composite_keys(shared_data, tmp_path):
    from bench.routing.wide_ex import merge_databases

    out = tmp_path / "wide.sqlite"
    info = merge_databases(["course_teach", "museum_visit"], out)
    assert info["tables_without_rows"] == [] and info["tables"] == 6
    merged = sqlite3.connect(out)
    for db, table in [("course_teach", "course_arrange"), ("museum_visit", "visit"), ("course_teach", "teacher")]:
        source = sqlite3.connect(shared_data / "spider" / "database" / db / f"{db}.sqlite")
        assert (sorted(merged.execute(f'SELECT * FROM "{db}__{table}"').fetchall())
                == sorted(source.execute(f'SELECT * FROM "{table}"').fetchall()))
    # tables.json names only Course_ID; the file's key (and so the merged one) has three columns
    keys = merged.execute("SELECT name FROM pragma_table_info('course_teach__course_arrange') WHERE pk > 0 "
                          "ORDER BY pk").fetchall()
    assert [k for (k,) in keys] == ["Course_ID", "Teacher_ID", "Grade"]


def test_tuning_questions_come_from_train_databases_only(shared_data):
    import json

    from bench.routing.wide_ex import pick_questions

    dev_qs, dev_dbs = pick_questions("dev", 2, 37)
    train_qs, train_dbs = pick_questions("train", 2, 37)
    assert len(dev_dbs) == len(train_dbs) == 19 and len(train_qs) == 38
    assert not set(train_dbs) & set(dev_dbs)
    dev_questions = {e["question"] for e in json.loads((shared_data / "spider" / "dev.json").read_text())}
    assert not {q["question"] for q in train_qs} & dev_questions
    assert pick_questions("train", 2, 37) == (train_qs, train_dbs)  # fixed by the seed
    for q in train_qs[:5]:  # each gold query runs on its own database
        con = sqlite3.connect(shared_data / "spider" / "database" / q["db_id"] / f"{q['db_id']}.sqlite")
        con.execute(q["query"]).fetchall()


def test_the_paired_sample_holds_only_questions_whose_prompts_differ(shared_data, tmp_path, monkeypatch):
    from bench.routing.wide_ex import condition_settings, merge_databases, pick_questions, prompts_differ
    from tagql.api import index_collection
    from tagql.config import load_settings

    monkeypatch.setenv("TAGQL_COLLECTIONS_DIR", str(tmp_path / "collections"))
    settings = load_settings()
    settings.answer.wide_schema_tables = 3  # 7 merged tables: wide here
    merge_databases(["concert_singer", "pets_1"], tmp_path / "wide.sqlite")
    index_collection("w", databases=[str(tmp_path / "wide.sqlite")], questions_per_table=4, settings=settings)
    assert condition_settings(settings, "wide@3o").answer.wide_table_ranking == "router"
    capped = condition_settings(settings, "wide@2").answer
    assert (capped.max_routed_tables, capped.wide_table_ranking) == (2, "context")
    qs = [e for e in pick_questions("dev", 1000, 37)[0] if e["db_id"] in ("concert_singer", "pets_1")][:12]
    same, info = prompts_differ("w", settings, qs, ["wide@2", "wide@2"], 5, 37)
    assert same == [] and info["differ"] == 0 and info["of"] == 12  # one condition twice: nothing differs
    picked, info = prompts_differ("w", settings, qs, ["wide@1", "wide@0"], 5, 37)
    assert info["differ"] >= 6 and len(picked) == 5 and all(p in qs for p in picked)  # 1 table vs every routed one
    assert prompts_differ("w", settings, qs, ["wide@1", "wide@0"], 5, 37)[0] == picked  # seeded
    held, held_info = prompts_differ("w", settings, qs, ["wide@1", "wide@0"], 12, 37, gold=True)
    # where gold coverage differs the prompts differ too (a 1-table prompt misses the joins)
    assert all(p in qs for p in held) and 0 < held_info["differ"] <= info["differ"] and held_info["gold_coverage_differs"]


def test_a_question_other_merged_databases_answer_by_the_same_sql_is_found(shared_data, capsys):
    from bench.routing.wide_ex import answered_elsewhere, summarize

    dbs = ["ship_1", "ship_mission", "world_1", "concert_singer"]
    ships = {"db_id": "ship_mission", "question": "For each type, how many ships are there?",
             "query": "SELECT TYPE, COUNT(*) FROM ship GROUP BY TYPE"}
    assert answered_elsewhere(ships, dbs) == ["ship_1"]  # ship_1's Ship has a Type too
    own = {"db_id": "ship_mission", "question": "What is the tonnage of the ship named Corbridge?",
           "query": "SELECT Tonnage FROM ship WHERE Name = 'Corbridge'"}
    assert answered_elsewhere(own, dbs) == []  # ship_1's Ship has no Tonnage
    records = [{"condition": "wide", "correct": c, "elsewhere": e, "prompt_tokens": 10, "wall_s": 1.0, "cold": False}
               for c, e in [(False, ["ship_1"]), (True, []), (False, [])]]
    s = summarize(records, ["wide"])["wide"]
    assert (s["n"], s["ex"], s["n_one_db"], s["ex_one_db"]) == (3, 0.3333, 2, 0.5)
    assert "EX there" in capsys.readouterr().out
