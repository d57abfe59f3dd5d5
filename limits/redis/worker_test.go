package redis

const workerEnv = "LIMITS_REDIS_WORKER"

func workerMain() int { return 0 }
