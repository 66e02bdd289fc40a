"""Lesson 04 (message passing): the self-check quiz (``quiz(load_quiz("message_passing"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question('Four workers hold shards of 200, 900, 400 and 500 examples. Which combination gives the full-batch gradient?',
             choices=('Average the four shard means', 'Sum the shard sums and divide by m = 2000 once', 'Sum the shard means', "Take rank 0's gradient"),
             salt='message_passing:1', answer='6605bbbd7856927a452f863a1697243dc678ddae40323a2b508bf65571b18e91',
             why='MAwJDQEEA1QAGxRZVQwAFxoTCQAKBxRSCBxISwkBDUMfQRVfSRMaCgARCAcDHkVTEQ4HRB9PGwQLRAFYDwlZGlcdBhEAJzQzLj5FUxEOB0QfTxsDAUQBSA0PQlVGVAYRRUIIAw4cFgAQHFVSBQgHH0hEDUMIQRZSQQBSEFNCEg4OBkVEGBsUABwOHQoICAlBBRIPGggYFwpTDQtGX0dMABgBEQAoKz9LERcJAw=='),
    Question('Rank 0 sends with tag 1 and rank 1 waits in recv for tag 2. What happens?',
             choices=('The message is delivered anyway', 'Rank 1 waits forever unless the recv has a timeout', 'Rank 0 raises at once', 'Tags are ignored'),
             salt='message_passing:2', answer='266d5f93aa8af8e85570a096cc536abfc9647bffb66d5578f5e9771265c8bd83',
             why='FgEPW0wVA1FFB1IWTg4cRg5SCEENDB1JAghPBgEXH0wLBFkaVx0GEQAMCggKUgZPFAYbR0wGG0sNF0xMTAUHW0QYHRpLTkURBxsGSFkGBgAbBxZLARIJXxVBFVtJAFIQTkIRDgpSBk8MHQZFTAcOGEQFTFkFDAdVVQBc'),
    Question('Why is naive (Hadoop) MapReduce slow for iterative ML such as gradient descent?',
             choices=('It cannot compute sums', 'Each iteration is a new job that re-reads and parses its input', 'It uses too little memory', 'It only runs on one machine'),
             salt='message_passing:3', answer='ccc311c5ca0d02e7ac89165bb5e21742822e723caa5fe84f8cbf0cb5dec4514d',
             why='NxQNXwdBCV9FBAFZVAoARh8TF1QQGxxPAhxPAgpEAUgBDhBDAFwgPWQRTEYOHAEACQ4MU0wJABlEFglMCAgMXQAAGhxNQgoIDBdLACMOHUEeBg5LARBMTABPQhJoGwY6TA0QAk9AVRFJRlkAAAAIAhcQBU5MEwddUhEBCkkNC0YAHEUSQE8yYkwOAQ9EVlwNAQABUkkaFwoaQi0HCx0KUFleRxdMHE8bARZMRBgEEFtUHR0XG0I2Fg4ADgBIWEEAH08JBBZEGEUJQQRTUgcGWUEMAUZZUhYAHwAHAAkODANECA1ZCRNCVU4RUpug9kUSBxdFRhAIAFIJHE8HARcfQgJBUg4ABAAQThYWSA=='),
    Question('PageRank with damping d = 0.85 on n = 100 pages: the rank of a page that NO page links to?',
             number='H0YaD1ZBUhQQRENMDEJHEk1IRRBXX0UQXRI=',
             why='FjsaDVFBSgsAlvrrAAZMSQFSTgAdrcIIHxoCSwsSCV9MCAwXTB0cElNLRVtPQksRTEBEEFxPUktUSlwdXVRCTUgRHFlUCgAUClIEUhxPG09MBgFGCA0CRh9P'),
    Question("In Pregel's bulk synchronous model, when does a vertex see a message sent to it in superstep k?",
             choices=('Immediately', 'In superstep k + 1, after the barrier', 'Never', 'At the end of the job'),
             salt='message_passing:5', answer='e097ccb1beb6e8da9542ecb4695f84c1cff9136b22d0baca72811cde219a1111',
             why='JUQfWBwEEElUEQJZSRFFBQAfFVUNClkAGAcKBUQJCV4fAAVfABEKGkgDCwEKXkVUEQobAA1PDQoWFgVIHlpCV0UHARhHBxZGDgAAAAsKFERMBgFLEAwJDQIEGk4ABwcJRRAWEgoCRQg0DhlFGwYMEUQBGA0NDUwaEkRDSQlM'),
]
