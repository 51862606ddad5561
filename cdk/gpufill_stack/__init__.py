"""The gpufill CDK app: one thin stack composed of one construct per capability."""
