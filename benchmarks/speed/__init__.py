"""Speed: how long apportion takes to simulate, solve, schedule a round, answer a request or start a job."""
