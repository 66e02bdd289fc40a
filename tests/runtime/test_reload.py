"""A learner's own module, edited after the workers imported it, is never run stale
(README, \"Bring your own code\"): the workers reload it before the next run and one line says so."""
import importlib
import sys
import textwrap
import uuid

from ddl_lab import Cluster

from .notebook import Notebook


def test_an_edited_helper_module_is_reloaded_in_the_workers_with_one_line(tmp_path, capsys):
    name = f"helpers_{uuid.uuid4().hex[:8]}"
    source = tmp_path / f"{name}.py"
    source.write_text("def answer():\n    return 1\n")
    sys.path.insert(0, str(tmp_path))
    try:
        helpers = importlib.import_module(name)
        nb = Notebook(helpers=helpers)
        nb.cell("""
            def ask():
                return helpers.answer()
        """)
        with Cluster(2) as cluster:
            assert cluster.run(nb["ask"]) == [1, 1]
            source.write_text(textwrap.dedent("""
                def answer():
                    return 22      # edited in the editor next to the notebook
            """))
            importlib.reload(helpers)                     # the learner reloads it in the kernel
            capsys.readouterr()
            assert cluster.run(nb["ask"]) == [22, 22]
            assert cluster.run(helpers.answer) == [22, 22]
        lines = [line for line in capsys.readouterr().out.splitlines() if "reloaded" in line]
        assert lines == [f"ddl_lab: the workers reloaded {name} (changed on disk since "
                         "they imported it)"]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_installed_packages_and_the_standard_library_are_never_reloaded():
    import json

    import ddl_lab.runtime.reload as reload
    assert reload._source(json) is None                       # not even watched
    assert not reload.ModuleWatch()._is_users("ddl_lab.runtime")   # an (editable) install
