"""litagent"""
