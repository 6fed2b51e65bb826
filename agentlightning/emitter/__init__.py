"""emitter"""
