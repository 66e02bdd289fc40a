"""Lesson 01 (gradient descent): the self-check quiz (``quiz(load_quiz("gradient_descent"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question('For a quadratic loss whose curvatures range from μ (flattest) to L (steepest), which fixed step size makes batch gradient descent converge fastest?',
             choices=('1/L', '2/(L + μ)', '2/L', '1/μ'),
             salt='gradient_descent:1', answer='f9a4915ed7f4ef93be6a81621e792d6c093ea484cda653e43d6e7425f1e9fb8c',
             why='MAwJDQkTEFVSVBsXAAcEBQdSAUkLChZUBQABSxcMHkQCChEaQg1SBRFCh+79UquTt9QJG0wbBw5EEwNfHxVCVUZUvMIAX0Wo01IETh1Pu5tMUk8nRA0fDR8MA1ZMEQENABUNAwFSEUgcFlVCDQMOBQcBQA0NFUL0k1RPWRJNTSpPWUXuxUZVwuz7TwgICx9ITBUNGhJbPllXCgAIT7zZAJvm3wAgQ08KF0QFQ0wADBpFGB0XRwMRAwtSB08OA1sAotxPie3BTB9DLUJeSQIXC0cHFkg='),
    Question('The steepest curvature of a loss is L = 4. Above which step size γ does batch gradient descent diverge?',
             number='H0YaD1ZBUhQVWFJbVEBfRl9cVREE',
             why='JgUYTgRBJX4AFx0XVgcXAQoBRUYWHVXu309TS1ZLIA1RQVAVFFRPWRBMUF1PEABZFgERAAUbTw4SAR5UTBIWX1BUHQ9FEBYOAB0RU1kCGlIJTxsDBQpMWQQEQlZBBwZX'),
    Question('The training set grows from 100,000 to 1,000,000 examples. One full gradient of J then costs about …',
             choices=('the same', '3× more', '10× more', '100× more'),
             salt='gradient_descent:3', answer='a340eede5e286bfda8974a50a06db2f904877ece60e94d032461fb439aef9718',
             why='IQUPRUwRA0hUHRMVAAYAFAYEBFQQGRAABRxPCkQXGUBMDhRfUlQXD0UQHEYKCgRNCQMQGkwGGxhEBwNeGEEFSE8DAVlMCwsDDgAJWVkYHFQETwJLTAsCTglBAxpGHQocREIVAx1fBkEVA1VPGgodAwEFCA0FEkJURRMeEEcLBwoKW0s='),
    Question('Doubling the mini-batch size does what to the variance of the mini-batch gradient?',
             choices=('doubles it', 'halves it', 'leaves it unchanged', 'divides it by four'),
             salt='gradient_descent:4', answer='a26e90cccf621de582bbd2eb089e892331f5ae972f741b637bc48cb847e5de61',
             why='MAwJDQEIDFMNFhMNQwpFAR0TAUkcAQEABRxPCkQJCUwCQQ1cABZSEE4GABYKHAFFFxtVVAkdAhheRAVZH0EUW1IdExdDB0UPHFKqo7vdWkJC'),
    Question('On which features does Adagrad give the largest steps compared with plain SGD?',
             choices=('the frequent ones', 'the rare ones', 'all equally', 'the ones with the largest values'),
             salt='gradient_descent:5', answer='b11830aec68004e7d42ab21cbb4090d617b4da9dbe6027b387cbd7e1396eee0b',
             why='JQANSh4ABhpEHQQQRAcWRg0LRVQRClVSAwAbSwsCTEgNAgoaUBUAGE0HEQMdVRYAGAwWVQEaAwoQAQgNHxAXW1IRFllHEAQCBhcLVApVVVINHQpLAgENWRkTB0kAHBMPRUIEBQwHCFUVDgFFCE8DAhAQAEhAQRFVAAAaHEkQRRUbFxVTWRwBQRVPAwoWAwkNRCUXWUgdXlloAx8HAVJDACoGG0cJHU9ZVFVdBEI='),
]
