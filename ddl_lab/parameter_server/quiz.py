"""Lesson 07 (parameter server): the self-check quiz (``quiz(load_quiz("parameter_server"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question("Stale-synchronous parallel with bound s: at clock t, a worker is guaranteed to see everyone's updates up to which clock?",
             choices=('t', 't − s', 't − s − 1', '0'),
             salt='parameter_server:1', answer='4bff2fb7a3f4572be4e0688f8cef928a17bd8f22773ff2b616dfa43d527be434',
             why='LAtMSBhBA1YOVFpLEFNWT1VSBAAOAAdLCR1PChBED0EDAgkaVFQBHEURRQcDHkVVCQsUVAkcTw0WCwENDw0NWUsHUpupxkUST5DtslkcVcLk/U9aX0QFWR9BDU1OVAcJRAMRAxxSEQCb5+cAH0+N68JEGA0NEwcaQRAWHERCCghPBgpQWUcBSAlPHB4JRAVDTDUHTkFUVFl6AwsBBgFCU1kmMRJeXVxLBQofWgkTERYAEgAWTUIRRo369wAKQ1VDAxoBHxdEGEUJDEJOVx0RHAlM'),
    Question('ID2223 review question 3 (Teta & Zangis): in asynchronous SGD on a parameter server, …',
             choices=('every worker waits for the others at each iteration', 'each worker pushes its gradient as soon as it is computed; the server applies it at once, possibly computed on a stale θ', 'workers average their models every H steps', 'the server waits for a fixed number of gradients'),
             salt='parameter_server:2', answer='f382bd10060e8d653e32393fd35bf2c5adefd7d5fa6c2b3e261ea798c8611c6d',
             why='KgtMXhUPAVJSGxwQUwMRDwAcXwAOMA5UR14SS1lEG3IYQYCyslS8zgCsxjkGUiJ/AgZZABhPjeP2RKOpEVpCTkgRUh1FDgQfT73hABAcVVQECk8YEAUASAIEEUkO'),
    Question("One replica of four is persistently 3× slower. Which mode wastes the most of the fast replicas' time waiting?",
             choices=('BSP', 'SSP with s = 3', 'asynchronous'),
             salt='parameter_server:3', answer='a09f6b68ac9f4025a395ea90deadbfffc521b8fc4ecf85f48a166e29a7274309',
             why='Jjc8DRsAC05TVBQWUkIRDgpSFkwWGBBTGE8dDhQIBU4NQQNOABEEHFIbRQUDHQZLQk8mczxPAw4QF0xZBARCXEEHBllPDAAVTwAQTlkcVUMAAAwAF0QNRQkABgEAFQEATgFFCAoEAFJZGBRJGBxB'),
    Question('Who proposed dividing the learning rate by the staleness of each gradient?',
             choices=('S. Zhang, Choromanska & LeCun (2015)', 'W. Zhang, Gupta, Lian & Liu (2016)', 'Dean et al. (2012)', 'Niu et al. (2011)'),
             salt='parameter_server:4', answer='9918ffea02638275389ca91adc05568401d387c980c9a4e837e64d796973d619',
             why='NxANQQkPB0lTWRMOQRAARg4BHE4aTyZnKE8GGEQzQg02CQNUR1QXDQADCUhPWixqOi48AF5fXl1NX0xoLTIlfgBcFxVBEREPDFIEVhwdFEcFAQhCRA0fDT9PQmBIFRweDEImDgAACk0YAQZLDU9JSygBL1gCQUoIEEVHUACA5fJPFgxGHwoHRQIbTzEMBQJKH01CXkkSFBxSBwsSTxsBRRgcWw=='),
    Question('During a Downpour run, one SHARD process dies. What must happen?',
             choices=('Nothing: the replicas carry on', 'The run stops, saying why: that shard held the only copy of its slice of θ', "Another replica takes over the shard's slice", 'The shard restarts from zero silently'),
             salt='parameter_server:5', answer='3850ed9030edc15e22d3904688bc94f0c088fbfa668ea076b8894b277d685aaa',
             why='JUQISA0FQkhFBB4QQwNFBQABEVNZABtMFU8GHxdEG0IeClkaQVQWHEEGRRUHExdEWQMaUwkcTxsFFhgNAwdCTkgRUhRPBgAKQ1IWT1kbHUVMHRoFRAkZXhhBB1REVAILTw8VEgMLRVcQGx0ADU8MBwEFHg0JExBVUlRaFlJCFwMcBgpSHE8TUgMCTwpEBwRIDwoSVUkaBlAO'),
]
