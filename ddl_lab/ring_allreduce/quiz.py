"""Lesson 06 (ring allreduce): the self-check quiz (``quiz(load_quiz("ring_allreduce"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question('ID2223 review question 5 (Teta & Zangis): in the ring allreduce, which phase comes first, and what does it leave?',
             choices=('share-only; every rank holds all chunks', 'share-reduce; each rank holds one completely reduced chunk', 'share-reduce; rank 0 holds the whole sum', 'share-only; each rank holds one chunk'),
             salt='ring_allreduce:1', answer='bb96d7379fd06aefe32bea9de11510b0b6c5ce149643bb63109ec341fc59b611',
             why='NwwNXwlMEF9EAREcAEoXAwsHBkVUHBZBGBsKGU1eTENMg+qoAEVSClQHFRVPHQMACgobREEbAEZMFEccRUFHGk5UExdEQgQCC0lFVBEKGwAfBw4ZAUkDQwAYQhJBGB4eQRYNAx1bRVAYHAZFH08bAwFECkQCCBFSRRBSGkgXCw0cUgRSFhobREwGAUsKRI6l/kFTGk0bABwAEREDHwFL'),
    Question('A ring of n = 5 ranks: after share-reduce, which chunk index does rank 3 own completely?',
             number='H0YaD1ZBVhYAVgZbGkJVSF9DGA==',
             why='JQIYSB5BEVJBBhdUUgcBEwwXRVIYAR4AHE8AHAoXTE4EFAxRAFwCWQtCVE9PV0VOQ09dE0xET1pNREkNWUFfGhRa'),
    Question('How many MB does each rank send in a ring allreduce of S = 100 MB on n = 8 ranks?',
             number='H0YaD1ZBUw0VWFJbVEBfRl4P',
             unit='MB',
             why='VkwCDY7p8BoRXV0XAKDSRjxSWABLrcIXQ1dPqdNEXR1cQS94AElSSBdXRSstXkVTCQMcVEwAGQ4WRF4FAkGAsrJUQ1AAX0VXW1IWVBwfBgADCU84SwpMSA0CChQ='),
    Question("As n grows, the ring's bandwidth term 2(n − 1)/n · S·β …",
             choices=('grows linearly with n', 'stays below 2·S·β', 'shrinks to zero', 'grows like log n'),
             salt='ring_allreduce:4', answer='953bd98c792505a59787cd1f7daf4064a19ff164ed19b4e78ab3fc78f256b845',
             why='VkwCDY7p8BoRXV0XAF5FVFVSEUgcTwVFHkIdCgoPTFsDDRdXRVQbCgAAChMBFgBEWQ0MAF48QUstEB8NAAAWX04XC1lUBxcLT0BNTlmN/bJMXkap06rdDQgOB0kAEwAWV0ISDxsaRU5ZjfW0TBsHDkQXDUAJQQNJAAYXHVUBAEZEUgdSFg4RQw0cG0wXSExAAxMHGlQcExcAA0USHRcABwpPR8Lg5wMEA1ZMQ47t6/iXusNX'),
    Question('For a tiny message (1 KiB) on many ranks, which allreduce has the fewest latency terms?',
             choices=('the ring', 'reduce + broadcast', 'the tree'),
             salt='ring_allreduce:5', answer='2a95733d36db93d7454623bc9c810d07304e2878255e0cf7f3d968ffeb97f8e4',
             why='JUQYXwkEQlRFERYKAFCH6uceCkdLTxvC4OZPGQsRAkkfWkJOSBFSC0kMAkYOHAEACwoRVQ8KT0BEBh5CDQUBW1MAUhxBAQ1GHxMcAEtHGwCO5/1LVU2umqLQTBoIJhcaVRAWDxkXRUgYAwNJAghPCgoATEkDFABWSRoVVQADCwJPAgxQHAMcTgkLTw8LEQ5BCUEAU04VAAAAFhcDCgFJABIKEFBMGwcEFwFMQQMGQlQABh0MTgYWRg4cAQAYAwZPTAwABgFED0EDEgcaVBtSDUgHRRQGHAIHCk8XQQILGAIAEAQNjuH2GkwRAQpPDEVWWV5F4t5bWwk='),
]
