"""What the tests share: paths, fixtures' helpers, builders of the objects several test
modules read, and the few stand-ins for what cannot run here (each says why).

A package, so that `import support.x` names one module wherever a test lives: pytest puts
tests/ (the first folder up without an ``__init__.py``) on ``sys.path``.
"""
