"""A small routing collection (8 Spider databases with data) shared by the routing tests."""

from __future__ import annotations

from pathlib import Path

import pytest

DBS = ["concert_singer", "pets_1", "car_1", "flight_2", "employee_hire_evaluation", "cre_Doc_Template_Mgt",
       "course_teach", "museum_visit"]


@pytest.fixture(scope="session")
def spider_dir(shared_data: Path) -> Path:
    return shared_data / "spider"


@pytest.fixture(scope="session")
def small_collection(spider_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    from tagql.routing.collection import Collection

    c = Collection.create("small", path=tmp_path_factory.mktemp("coll") / "small")
    c.add_spider(spider_dir / "tables.json", only=DBS)
    c.save()
    return c


@pytest.fixture(scope="session")
def embedder():
    """The default embedder (what the quick start installs), passed to every router explicitly."""
    from tagql.embeddings import make_embedder

    return make_embedder()


@pytest.fixture(scope="session")
def small_router(small_collection, embedder):
    from tagql.routing.ours import BuildConfig, GraphRouter

    return GraphRouter.build(small_collection, BuildConfig(questions_per_table=8, seed=0, finetune=False),
                             embedder=embedder)
