"""algorithm"""
