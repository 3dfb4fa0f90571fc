"""Recording a real provider and replaying it: the recording proxy (``llmsim record``), its cassettes, and the
replay of a cassette's exchanges byte for byte (``llmsim replay``).

On top of the rooms (as the command line is): it is served by the package's own server (``server.listener``)
and reads credentials' fingerprints from ``sim``; it never simulates: a recording proxy forwards.
"""
