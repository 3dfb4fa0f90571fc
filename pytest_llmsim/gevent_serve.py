"""``llmsim serve --io gevent``: the same server in one thread, a greenlet per connection.

gevent patches the standard library (threads become greenlets; sockets,
locks, queues and sleeps wait cooperatively) before anything else is
imported, then the command runs unchanged: the same handler, engine,
faults and control API, with no thread switch per request and no thread
per open stream. ``llmsim serve --io gevent`` execs this module, and so does
``--io loop`` (the event-loop core, :mod:`pytest_llmsim.server.loop_server`,
which needs the same patching).
"""

from gevent import monkey

monkey.patch_all()

import sys  # noqa: E402  (after the patching, on purpose)

from pytest_llmsim.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
